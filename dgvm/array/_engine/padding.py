"""The arguments of ``pad``, read as NumPy reads them, and the coordinate maps of its
modes that copy the array's own elements.

``pad_width`` and ``constant_values`` broadcast to one (before, after) pair per axis
(an int, ``(n,)``, ``(before, after)``, or one pair per axis). In modes ``edge``,
``reflect``, ``symmetric`` and ``wrap`` every padded element is an element of the
array: output coordinate j along an axis of n elements is input coordinate
``numpy.pad(arange(n), width, mode)[j]``, and the axes are independent (NumPy pads them
one after the other, which composes to the same maps), so the result is one gather.
"""

from __future__ import annotations

import numpy as np

from dgvm.protocol.errors import NotSupported

GATHERED = ("edge", "reflect", "symmetric", "wrap")  # padded from the array's own elements
FILLED = ("constant", "empty")  # padded with values ("empty": NumPy leaves them undefined; zeros here)
_NUMPYS = FILLED + GATHERED + ("linear_ramp", "maximum", "mean", "median", "minimum")
_KEYWORDS = {"constant": {"constant_values"}, "empty": set(), "edge": set(), "wrap": set(),
             "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}


def check_mode(mode, kwargs: dict) -> None:
    """NumPy's checks of ``mode`` and its keywords; the modes not offered raise
    ``NotSupported``."""
    if callable(mode):
        raise NotSupported("pad: a function as mode is not supported by dgvm.array; modes: "
                           + ", ".join(FILLED + GATHERED))
    if mode not in _NUMPYS:
        raise ValueError(f"mode {mode!r} is not supported")
    if mode not in _KEYWORDS:
        raise NotSupported(f"pad: mode {mode!r} is not supported by dgvm.array; modes: "
                           + ", ".join(FILLED + GATHERED))
    unknown = set(kwargs) - _KEYWORDS[mode]
    if unknown:
        raise ValueError(f"unsupported keyword arguments for mode {mode!r}: {sorted(unknown)}")
    reflect_type = kwargs.get("reflect_type", "even")
    if reflect_type not in ("even", "odd"):
        raise ValueError(f"pad: reflect_type must be 'even' or 'odd', not {reflect_type!r}")
    if reflect_type == "odd":
        raise NotSupported("pad: reflect_type='odd' is not supported by dgvm.array (only 'even')")


def _pairs(value, ndim: int, name: str) -> np.ndarray:
    try:
        return np.broadcast_to(value, (ndim, 2))
    except ValueError:
        raise ValueError(f"pad: {name} {np.asarray(value).tolist()!r} does not give a (before, after) "
                         f"pair for each of the {ndim} axes") from None


def widths(pad_width, ndim: int) -> list[tuple[int, int]]:
    """(before, after) per axis, non-negative ints."""
    w = np.asarray(pad_width)
    if w.dtype.kind not in "iu":
        raise TypeError(f"`pad_width` must be of integral type, not {w.dtype}")
    w = _pairs(w, ndim, "pad_width")
    if (w < 0).any():
        raise ValueError(f"index can't contain negative values (pad_width {w.tolist()})")
    return [(int(b), int(a)) for b, a in w]


def constants(constant_values, ndim: int, dtype) -> list[tuple]:
    """(before, after) fill values per axis, cast to the array's dtype as NumPy's
    assignment casts them."""
    v = np.asarray(constant_values)
    if v.dtype == object:
        raise TypeError(f"pad: constant_values must be numbers, not {constant_values!r}")
    v = _pairs(v, ndim, "constant_values")
    with np.errstate(all="ignore"):
        cast = v.astype(dtype)
    return [(b, a) for b, a in cast]


def maps(shape: tuple, pairs: list, mode: str) -> list:
    """Per axis: the input coordinates of the padded output's (None: not padded)."""
    return [None if not (b or a) else np.pad(np.arange(n), (b, a), mode=mode)
            for n, (b, a) in zip(shape, pairs)]
