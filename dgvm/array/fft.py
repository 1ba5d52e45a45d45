"""The standard's ``fft`` extension: ``dgvm.array.fft``.

Discrete Fourier transforms run where each result chunk lives, with NumPy's pocketfft
on ``cpu`` and cuFFT (CuPy) on GPUs (``_engine.fft_ops``). A transform along an axis
needs that axis whole: the result's chunks hold it whole, and each is made from the
input region it covers (a view where the input's chunks hold the axis whole already,
else the axis's pieces gathered from the workers that hold them, as a rechunk would).
An n-d transform is NumPy's sequence of 1-d transforms (``rfftn``'s real one first, on
the last axis; ``irfftn``'s last), consecutive ones in one pass where the input holds
their axes whole. ``fftshift``/``ifftshift`` are rolls, and the sample frequencies
are computed where their chunks live.

Results are complex128 (complex64 for float32 and complex64 input), and real of the
same precision for ``irfft``, ``irfftn`` and ``hfft``; integer and bool input is
transformed as float64, as in NumPy. The standard's keyword arguments may also be given
by position, as NumPy's programs give them (``irfft(X, n)``, ``fftfreq(n, d)``).
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.fft_ops import (
    FFTPass, Step, complex_of, joins, limit_bytes, pass_chunks, reads_of, real_of,
)
from dgvm.array._engine.placement import result_like
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.creation import arange
from dgvm.array.data_types import astype
from dgvm.array.manipulation import roll

__all__ = [
    "fft", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifftn", "ifftshift", "ihfft",
    "irfft", "irfftn", "rfft", "rfftfreq", "rfftn",
]

NORMS = ("backward", "ortho", "forward")
_REAL_OUT = ("irfft", "hfft")  # complex in, real out
_REAL_IN = ("rfft", "ihfft")  # real in, complex out


# -- checking the arguments ------------------------------------------------------------------
def _check(x, name: str) -> None:
    if not isinstance(x, ArrayCore):
        raise TypeError(f"dgvm.array.fft.{name} expects a DArray, got {type(x).__name__}")
    if name in (*_REAL_IN, "rfftn") and x.dtype.kind == "c":
        raise TypeError(f"dgvm.array.fft.{name} transforms real input; got {x.dtype} (use fft for complex input)")


def _norm(norm, name: str) -> str:
    if norm is None:  # NumPy's default
        return "backward"
    if norm not in NORMS:
        raise ValueError(f"dgvm.array.fft.{name}: norm must be one of {', '.join(map(repr, NORMS))}, not {norm!r}")
    return norm


def _axis(axis, ndim: int, name: str, what: str = "axis") -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"dgvm.array.fft.{name}: {what} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(
            f"dgvm.array.fft.{name}: {what} {axis} is out of bounds for an array of {ndim} dimensions")
    return int(axis) % ndim


def _points(n, name: str, what: str = "n") -> int:
    """A transform length: an int of at least 1."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"dgvm.array.fft.{name}: {what} must be an int, got {n!r}")
    if n < 1:
        raise ValueError(f"dgvm.array.fft.{name}: {what}={n} is not a valid number of FFT data points (at least 1)")
    return int(n)


def _nd_args(x, s, axes, name: str) -> tuple[list, list]:
    """The axes (None: all) and the transform length along each (None: the input's;
    an entry -1: the input's along that axis), as NumPy's n-d functions take them."""
    if axes is None:
        axes = list(range(x.ndim))
    else:
        axes = (axes,) if isinstance(axes, (int, np.integer)) else axes
        axes = [_axis(a, x.ndim, name, "axes entry") for a in axes]
    if s is None:
        return axes, [x.shape[a] for a in axes]
    s = [s] if isinstance(s, (int, np.integer)) else list(s)
    if len(s) != len(axes):
        raise ValueError(f"dgvm.array.fft.{name}: s has {len(s)} entries for {len(axes)} axes {tuple(axes)} "
                         "(pass axes with s to transform fewer axes than the array has)")
    return axes, [x.shape[a] if v == -1 else _points(v, name, "s entry") for v, a in zip(s, axes)]


# -- running the transforms ------------------------------------------------------------------
def _pass(x, steps: list, norm: str):
    """One blockwise pass of ``steps`` over ``x``: a new array whose chunks hold the
    transformed axes whole, each made where the input chunk of its first element lives."""
    first, last = steps[0], steps[-1]
    cast = real_of(x.dtype) if first.name in _REAL_IN else complex_of(x.dtype)
    dtype = real_of(x.dtype) if last.name in _REAL_OUT else complex_of(x.dtype)
    lengths: dict[int, int] = {}
    for s in steps:
        lengths[s.axis] = s.out_length()
    shape = tuple(lengths.get(a, m) for a, m in enumerate(x.shape))
    limit = limit_bytes(x.chunks, dtype.itemsize)
    chunks = pass_chunks(x.chunks, lengths, dtype.itemsize, limit)
    out = result_like(x, shape, dtype, chunks, lambda lo: [0 if a in lengths else v for a, v in enumerate(lo)])
    op = FFTPass(tuple(steps), norm, reads_of(steps, x.shape), cast, dtype)
    blockwise.run(op, out, [x], f"fft-{first.name}")
    return out


def _transform(x, steps: list, norm: str):
    """``steps`` in order over ``x``, grouped into passes (``fft_ops.joins``)."""
    pending: list = []
    for s in steps:
        if pending and not joins(s, pending, x.chunks):
            x, pending = _pass(x, pending, norm), []
        pending.append(s)
    return _pass(x, pending, norm)


def _one(name: str, x, n, axis, norm):
    _check(x, name)
    norm = _norm(norm, name)
    if x.ndim == 0:
        raise np.exceptions.AxisError(
            f"dgvm.array.fft.{name} needs an array of at least one dimension, got a 0-d array")
    axis = _axis(axis, x.ndim, name)
    if n is None:
        m = x.shape[axis]
        n = 2 * (m - 1) if name in _REAL_OUT else m
        if n < 1:
            raise ValueError(f"dgvm.array.fft.{name}: an axis of length {m} gives n={n} points; pass n")
    return _transform(x, [Step(name, axis, _points(n, name))], norm)


# -- 1-d transforms --------------------------------------------------------------------------
@empty_aware(numpy=np.fft)
def fft(x, /, n=None, axis=-1, norm="backward"):
    """1-d discrete Fourier transform along ``axis``, of ``n`` points (the input cropped
    or padded with zeros; default: its length); ``norm``: which direction is scaled,
    "backward" (none here, 1/n in ``ifft``), "ortho" (1/sqrt(n) both) or "forward"."""
    return _one("fft", x, n, axis, norm)


@empty_aware(numpy=np.fft)
def ifft(x, /, n=None, axis=-1, norm="backward"):
    """1-d inverse discrete Fourier transform along ``axis`` (``fft``'s arguments)."""
    return _one("ifft", x, n, axis, norm)


@empty_aware(numpy=np.fft)
def rfft(x, /, n=None, axis=-1, norm="backward"):
    """1-d discrete Fourier transform of real input along ``axis``: the ``n // 2 + 1``
    non-negative frequency terms."""
    return _one("rfft", x, n, axis, norm)


@empty_aware(numpy=np.fft)
def irfft(x, /, n=None, axis=-1, norm="backward"):
    """Inverse of ``rfft``: ``n`` real points (default ``2 * (m - 1)`` for an axis of
    length m) from the ``n // 2 + 1`` non-negative frequency terms along ``axis``."""
    return _one("irfft", x, n, axis, norm)


@empty_aware(numpy=np.fft)
def hfft(x, /, n=None, axis=-1, norm="backward"):
    """Discrete Fourier transform of a signal with Hermitian symmetry (given by its
    ``n // 2 + 1`` first terms along ``axis``): ``n`` real points (default ``2 * (m - 1)``)."""
    return _one("hfft", x, n, axis, norm)


@empty_aware(numpy=np.fft)
def ihfft(x, /, n=None, axis=-1, norm="backward"):
    """Inverse of ``hfft``: the ``n // 2 + 1`` first terms of the Hermitian spectrum of
    real input along ``axis``."""
    return _one("ihfft", x, n, axis, norm)


# -- n-d transforms --------------------------------------------------------------------------
def _unchanged(x):
    return astype(x, x.dtype)  # a copy: a result never aliases its input


@empty_aware(numpy=np.fft)
def fftn(x, /, s=None, axes=None, norm="backward"):
    """n-d discrete Fourier transform over ``axes`` (default: all), of ``s[i]`` points
    along ``axes[i]`` (default, or -1: the input's length), last axis first."""
    _check(x, "fftn")
    norm = _norm(norm, "fftn")
    axes, s = _nd_args(x, s, axes, "fftn")
    if not axes:  # nothing to transform: NumPy answers the input
        return _unchanged(x)
    return _transform(x, [Step("fft", a, n) for a, n in reversed(list(zip(axes, s)))], norm)


@empty_aware(numpy=np.fft)
def ifftn(x, /, s=None, axes=None, norm="backward"):
    """n-d inverse discrete Fourier transform (``fftn``'s arguments)."""
    _check(x, "ifftn")
    norm = _norm(norm, "ifftn")
    axes, s = _nd_args(x, s, axes, "ifftn")
    if not axes:
        return _unchanged(x)
    return _transform(x, [Step("ifft", a, n) for a, n in reversed(list(zip(axes, s)))], norm)


def _real_axes(axes, name: str) -> None:
    if not axes:
        raise IndexError(f"dgvm.array.fft.{name} needs at least one axis to transform (its last is the real one)")


@empty_aware(numpy=np.fft)
def rfftn(x, /, s=None, axes=None, norm="backward"):
    """n-d discrete Fourier transform of real input: ``rfft`` along the last of
    ``axes`` (``s[-1] // 2 + 1`` terms), then ``fft`` along the others."""
    _check(x, "rfftn")
    norm = _norm(norm, "rfftn")
    axes, s = _nd_args(x, s, axes, "rfftn")
    _real_axes(axes, "rfftn")
    steps = [Step("rfft", axes[-1], s[-1])] + [Step("fft", a, n) for a, n in reversed(list(zip(axes[:-1], s[:-1])))]
    return _transform(x, steps, norm)


@empty_aware(numpy=np.fft)
def irfftn(x, /, s=None, axes=None, norm="backward"):
    """Inverse of ``rfftn``: ``ifft`` along all but the last of ``axes``, then ``irfft``
    along it, to ``s[-1]`` real points (default ``2 * (m - 1)``)."""
    _check(x, "irfftn")
    norm = _norm(norm, "irfftn")
    given = s is not None
    axes, s = _nd_args(x, s, axes, "irfftn")
    _real_axes(axes, "irfftn")
    if not given:
        s[-1] = _points(2 * (x.shape[axes[-1]] - 1), "irfftn", f"the default length of axis {axes[-1]}")
    steps = [Step("ifft", a, n) for a, n in zip(axes[:-1], s[:-1])] + [Step("irfft", axes[-1], s[-1])]
    return _transform(x, steps, norm)


# -- frequencies and shifts ------------------------------------------------------------------
def _window(n, d, name: str) -> float:
    """``1 / (n * d)``, the spacing of the frequencies of an ``n``-point window."""
    n = _points(n, name)
    if d == 0:
        raise ValueError(f"dgvm.array.fft.{name}: the sample spacing d must not be zero")
    return 1.0 / (n * d)


def fftfreq(n, /, d=1.0, *, device=None, chunks="auto"):
    """The sample frequencies of an ``n``-point transform with sample spacing ``d``
    (float64): ``[0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1] / (d * n)``."""
    val = _window(n, d, "fftfreq")
    k = arange(n, dtype=np.int64, chunks=chunks)
    wrapped = apply("where", apply("less", k, (n - 1) // 2 + 1), k, apply("subtract", k, n))
    return apply("multiply", wrapped, val)


def rfftfreq(n, /, d=1.0, *, device=None, chunks="auto"):
    """The sample frequencies of ``rfft``'s terms (float64):
    ``[0, 1, ..., n // 2] / (d * n)``."""
    val = _window(n, d, "rfftfreq")
    return apply("multiply", arange(n // 2 + 1, dtype=np.int64, chunks=chunks), val)


def _shift(x, axes, sign: int, name: str):
    _check(x, name)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = (axes,)
    axes = tuple(_axis(a, x.ndim, name, "axes entry") for a in axes)
    if not axes:
        return _unchanged(x)
    return roll(x, tuple(sign * (x.shape[a] // 2) for a in axes), axis=axes)


@empty_aware(numpy=np.fft)
def fftshift(x, /, axes=None):
    """``x`` with the zero-frequency term moved to the middle of ``axes`` (default: all):
    a roll by half of each axis's length."""
    return _shift(x, axes, 1, "fftshift")


@empty_aware(numpy=np.fft)
def ifftshift(x, /, axes=None):
    """Inverse of ``fftshift``: a roll back by half of each axis's length."""
    return _shift(x, axes, -1, "ifftshift")
