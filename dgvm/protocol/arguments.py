"""Checks of the arguments dgvm is called with, at its edges: the public API and every
RPC handler of the scheduler and the workers.

Each check takes the argument's name and value and returns the value in its plain form
(an ``int``, a ``bool``, a list of ints), or raises ``InvalidArgumentType`` (a
``TypeError``) or ``InvalidArgument`` (a ``ValueError``) whose message names the
argument, shows the value and says what is allowed. A handler's refusal travels to its
caller as data and is raised there as the same error (``messages.REFUSALS``). Bools are
not integers here (``True`` as an offset is a bug, not 1), nor are floats (``1.0`` as a
chunk index neither).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from dgvm.protocol.errors import InvalidArgument, InvalidArgumentType

INT64_MAX = 2**63 - 1  # ids, addresses, offsets and sizes travel and are kept as int64


def shown(value) -> str:
    """``value`` as a message shows it: its type and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def is_integer(value) -> bool:
    """A Python or NumPy integer, not a bool."""
    if type(value) is int:  # (most: an ABC's isinstance costs a microsecond on every report)
        return True
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and \
        type(value).__name__ != "bool_"


def integer(name: str, value, low: int | None = 0, high: int | None = INT64_MAX) -> int:
    """``value`` as an int in ``[low, high]`` (None: unbounded on that side)."""
    if not is_integer(value):
        raise InvalidArgumentType(f"{name} must be an integer, got {shown(value)}")
    n = int(value)
    if (low is not None and n < low) or (high is not None and n > high):
        raise InvalidArgument(f"{name} must be {_bounds(low, high)}, got {n}")
    return n


def _bounds(low, high) -> str:
    if high is None:
        return f">= {low}"
    if low is None:
        return f"<= {high}"
    return f"between {low} and {high}"


def maybe_integer(name: str, value, low: int | None = 0, high: int | None = INT64_MAX) -> int | None:
    """``integer``, or None for None."""
    return None if value is None else integer(name, value, low, high)


def integers(name: str, values, low: int | None = 0, high: int | None = INT64_MAX) -> list[int]:
    """``values`` (a list, tuple or 1-d integer array) as a list of ints in ``[low, high]``."""
    if hasattr(values, "dtype") and hasattr(values, "ndim"):  # an array: checked whole
        if values.ndim != 1 or values.dtype.kind not in "iu":
            raise InvalidArgumentType(
                f"{name} must be a 1-d array of integers, got a {values.ndim}-d array of {values.dtype}")
        out = values.tolist()
        if values.size:
            lo, hi = int(values.min()), int(values.max())
            if (low is not None and lo < low) or (high is not None and hi > high):
                bad = lo if low is not None and lo < low else hi
                raise InvalidArgument(f"{name} must hold integers {_bounds(low, high)}, got {bad}")
        return out
    if isinstance(values, (str, bytes, bytearray, dict)) or not hasattr(values, "__iter__"):
        raise InvalidArgumentType(f"{name} must be a list of integers, got {shown(values)}")
    if isinstance(values, list) and set(map(type, values)) <= {int}:  # the common case, in C
        if values and ((low is not None and min(values) < low) or (high is not None and max(values) > high)):
            bad = min(values) if low is not None and min(values) < low else max(values)
            raise InvalidArgument(f"{name} must hold integers {_bounds(low, high)}, got {bad}")
        return values
    return [integer(f"{name}[{k}]", v, low, high) for k, v in enumerate(values)]


def flag(name: str, value) -> bool:
    """``value`` as a bool: ``True``/``False`` (or NumPy's), nothing else."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise InvalidArgumentType(f"{name} must be True or False, got {shown(value)}")


def text(name: str, value, allowed=None) -> str:
    """``value`` as a non-empty str (one of ``allowed`` when given)."""
    if not isinstance(value, str):
        raise InvalidArgumentType(f"{name} must be a string, got {shown(value)}")
    if allowed is not None and value not in allowed:
        raise InvalidArgument(f"{name} must be one of {sorted(allowed)}, got {value!r}")
    if not value:
        raise InvalidArgument(f"{name} must not be empty")
    return value


def maybe_text(name: str, value, allowed=None) -> str | None:
    """``text``, or None for None."""
    return None if value is None else text(name, value, allowed)


def number(name: str, value, low: float | None = 0.0) -> float:
    """``value`` (an int or a float, not a bool) as a finite float >= ``low``."""
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not isinstance(value, numbers.Real):
        raise InvalidArgumentType(f"{name} must be a number, got {shown(value)}")
    x = float(value)
    if not math.isfinite(x) or (low is not None and x < low):
        raise InvalidArgument(f"{name} must be a finite number{f' >= {low}' if low is not None else ''}, "
                              f"got {x}")
    return x


def mapping(name: str, value) -> dict:
    """``value``, which must be a dict."""
    if not isinstance(value, dict):
        raise InvalidArgumentType(f"{name} must be a dict, got {shown(value)}")
    return value


def sequence(name: str, value, length: int | None = None) -> list:
    """``value`` as a list (from a list or tuple), of ``length`` items when given."""
    if not isinstance(value, (list, tuple)):
        raise InvalidArgumentType(f"{name} must be a list, got {shown(value)}")
    if length is not None and len(value) != length:
        raise InvalidArgument(f"{name} must have {length} items, got {len(value)}")
    return list(value)


def dtype_name(name: str, value) -> str:
    """The name of a NumPy dtype of fixed-size values (none of Python objects)."""
    text(name, value)
    try:
        d = np.dtype(value)
    except TypeError:
        raise InvalidArgument(f"{name} {value!r} names no NumPy dtype") from None
    if d.hasobject or d.itemsize == 0:
        raise InvalidArgument(f"{name} {value!r} is not a dtype of fixed-size values")
    return value


def grid(name: str, chunks, shape: list[int]) -> tuple[tuple[int, ...], ...]:
    """Block lengths per axis (each > 0) that add up to ``shape``."""
    axes = sequence(name, chunks, len(shape))
    out = []
    for k, (axis, n) in enumerate(zip(axes, shape)):
        blocks = integers(f"{name}[{k}]", axis, 1)
        if sum(blocks) != n:
            raise InvalidArgument(f"{name}[{k}] adds up to {sum(blocks)}, not to the shape's {n}")
        out.append(tuple(blocks))
    return tuple(out)
