"""Reductions and statistics: partials on each worker, combined once on the caller.

Each chunk is reduced where it lives (one task per worker); the partials (one value per
chunk, or one row per chunk along the kept axes) come back and are combined in one step,
then kept on the caller as a host value (``dgvm.array._engine.deferred``), stored in device
memory only when a cluster operation needs it. ``var``/``std`` take two passes (the mean,
then the squared deviations from it), as NumPy does, so they are as exact as NumPy's.
"""

from __future__ import annotations

import builtins
import warnings
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array.darray import DArray


def normalize_axis(axis, ndim: int, *, sort: bool = True) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple) -> tuple of non-negative axes, sorted unless
    ``sort=False``; AxisError for an axis out of range, ValueError for a repeated one."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < builtins.max(ndim, 1):
            raise np.exceptions.AxisError(f"axis {a} is out of bounds for an array of {ndim} dimensions")
        out.append(int(a) % builtins.max(ndim, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(out)) if sort else tuple(out)


def _result(value, like: DArray) -> DArray:
    # Combined here, so kept here until a cluster operation needs it (a host value).
    from dgvm.array._engine.deferred import on_caller

    return on_caller(value, like.client)


@dataclass
class _Partial:
    fn: str
    axes: tuple
    dtype: object

    @property
    def reduction(self):
        """What a fused kernel over a deferred tree ends with (``dgvm.array._engine.fused``)."""
        return self.fn, self.axes, self.dtype

    def partial(self, chunk, lo, hi, xp):
        kw = {} if self.dtype is None else {"dtype": self.dtype}
        with np.errstate(all="ignore"):
            return getattr(xp, self.fn)(chunk, axis=self.axes, keepdims=True, **kw)


def _partials(x: DArray, op, name: str) -> np.ndarray:
    """Every chunk's partial (computed where it lives), assembled in block order."""
    return blockwise.assemble(blockwise.collect(op, x, name), x.numblocks)


def _reduce(x: DArray, fn: str, axis, keepdims: bool, dtype=None) -> DArray:
    axes = normalize_axis(axis, x.ndim)
    whole = _partials(x, _Partial(fn, axes, dtype), fn)
    with np.errstate(all="ignore"):
        kw = {"dtype": dtype} if dtype is not None else {}
        value = getattr(np, fn)(whole, axis=axes, keepdims=keepdims, **kw)
    return _result(value, x)


def _sum_dtype(x: DArray, dtype, fn="sum"):
    if dtype is not None:
        return np.dtype(dtype)
    return getattr(np, fn)(np.ones(1, dtype=x.dtype)).dtype


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (None: all); integers sum in the default integer type."""
    return _reduce(x, "sum", axis, keepdims, _sum_dtype(x, dtype))


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    return _reduce(x, "prod", axis, keepdims, _sum_dtype(x, dtype, "prod"))


def max(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _reduce(x, "max", axis, keepdims)


def min(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _reduce(x, "min", axis, keepdims)


def all(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _reduce(x, "all", axis, keepdims)


def any(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _reduce(x, "any", axis, keepdims)


def _count(x: DArray, axes) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _float_dtype(x: DArray):
    return np.mean(np.ones(1, dtype=x.dtype)).dtype


def mean(x, /, *, axis=None, keepdims=False):
    """Arithmetic mean over ``axis``."""
    axes = normalize_axis(axis, x.ndim)
    dt = _float_dtype(x)
    total = np.sum(_partials(x, _Partial("sum", axes, dt), "mean"), axis=axes, keepdims=keepdims, dtype=dt)
    with np.errstate(all="ignore"):
        return _result((total / _count(x, axes)).astype(dt), x)


@dataclass
class _SquaredDeviation:
    mean: np.ndarray  # keepdims shape: 1 along the reduced axes
    axes: tuple
    dtype: object

    def partial(self, chunk, lo, hi, xp):
        sl = tuple(slice(0, 1) if self.mean.shape[a] == 1 else slice(lo[a], hi[a])
                   for a in range(chunk.ndim))
        d = chunk.astype(self.dtype) - xp.asarray(self.mean[sl])
        d = (d * d.conj()).real if xp.iscomplexobj(d) else d * d
        return xp.sum(d, axis=self.axes, keepdims=True)


def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    """Variance over ``axis``, dividing by ``N - correction``."""
    axes = normalize_axis(axis, x.ndim)
    dt = _float_dtype(x)
    n = _count(x, axes)
    m = np.sum(_partials(x, _Partial("sum", axes, dt), "var-mean"), axis=axes, keepdims=True, dtype=dt) / n
    ss = np.sum(_partials(x, _SquaredDeviation(m, axes, dt), "var"), axis=axes, keepdims=keepdims)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = ss / np.maximum(n - correction, 0)
    return _result(out.astype(np.empty(0, dt).real.dtype), x)


def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    from dgvm.array.elementwise import apply

    return apply("sqrt", var(x, axis=axis, correction=correction, keepdims=keepdims))


@dataclass
class _ArgPartial:
    """Per chunk: the extreme values along ``axis`` (or of all) and their global indices."""

    fn: str  # "argmin" or "argmax"
    axis: int | None
    shape: tuple

    def partial(self, chunk, lo, hi, xp):
        arg = getattr(xp, self.fn)
        if self.axis is None:
            i = int(arg(chunk))
            local = np.unravel_index(i, chunk.shape)
            value = chunk.reshape(-1)[i]
            flat = np.ravel_multi_index([l + o for l, o in zip(local, lo)], self.shape) if self.shape else 0
            return np.asarray([value.item() if hasattr(value, "item") else value]).reshape(
                (1,) * chunk.ndim), np.full((1,) * chunk.ndim, flat, dtype=np.int64)
        i = arg(chunk, axis=self.axis, keepdims=True)
        value = xp.take_along_axis(chunk, i, axis=self.axis)
        return value, i.astype(np.int64) + lo[self.axis]


def _pick(values, index, axis, fn):
    """Among candidates along ``axis``: the extreme value (NaN first, as NumPy) with the
    smallest index."""
    if np.issubdtype(values.dtype, np.inexact):
        nan = np.isnan(values)
    else:
        nan = np.zeros(values.shape, dtype=bool)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = (np.min if fn == "argmin" else np.max)(np.where(nan, values.dtype.type(0) if values.dtype.kind != "b" else False, values), axis=axis, keepdims=True)
    anynan = nan.any(axis=axis, keepdims=True)
    cand = np.where(anynan, nan, values == best)
    big = np.iinfo(np.int64).max
    return np.where(cand, index, big).min(axis=axis)


def _arg(x: DArray, fn: str, axis, keepdims: bool) -> DArray:
    if axis is not None:
        axis = normalize_axis(axis, x.ndim)[0]
    parts = blockwise.collect(_ArgPartial(fn, axis, x.shape), x, fn)
    values = blockwise.assemble({b: p[0] for b, p in parts.items()}, x.numblocks)
    index = blockwise.assemble({b: p[1] for b, p in parts.items()}, x.numblocks)
    if axis is None:
        out = _pick(values.reshape(-1), index.reshape(-1), 0, fn)
        if keepdims:
            out = np.asarray(out).reshape((1,) * x.ndim)
    else:
        out = _pick(values, index, axis, fn)
        if keepdims:
            out = np.expand_dims(out, axis)
    return _result(np.asarray(out, dtype=np.int64), x)


def argmin(x, /, *, axis=None, keepdims=False):
    return _arg(x, "argmin", axis, keepdims)


def argmax(x, /, *, axis=None, keepdims=False):
    return _arg(x, "argmax", axis, keepdims)


@dataclass
class _Prefix:
    """Blockwise op of a cumulative sum: the chunk's own running sum plus the totals of
    the blocks before it along ``axis`` (``offsets[b]``, one cross-section per block)."""

    axis: int
    starts: np.ndarray  # block starts of the input along axis
    offsets: np.ndarray  # (nblocks, *cross-section), keepdims along axis
    shift: int  # 1 with include_initial
    n: int
    dtype: object

    def block(self, read, lo, hi, xp):
        a = self.axis
        xlo, xhi = list(lo), list(hi)
        xlo[a], xhi[a] = builtins.max(lo[a] - self.shift, 0), builtins.min(hi[a] - self.shift, self.n)
        b = int(np.searchsorted(self.starts, xlo[a], side="right")) - 1
        cross = tuple(slice(0, 1) if i == a else slice(lo[i], hi[i]) for i in range(len(lo)))
        base = xp.asarray(self.offsets[b][cross])
        shape = [h - l for l, h in zip(lo, hi)]
        out = xp.empty(shape, dtype=self.dtype)
        first = 1 if lo[a] == 0 and self.shift else 0
        if first:
            out[tuple(slice(0, 1) if i == a else slice(None) for i in range(len(lo)))] = 0
        if xhi[a] > xlo[a]:
            run = xp.cumsum(read(0, xlo, xhi), axis=a, dtype=self.dtype) + base
            out[tuple(slice(first, None) if i == a else slice(None) for i in range(len(lo)))] = run
        return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running sum along ``axis`` (required for arrays of more than one dimension)."""
    from dgvm.array.creation import empty

    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"cumulative_sum of a {x.ndim}-d array needs axis=")
        axis = 0
    axis = normalize_axis(axis, x.ndim)[0]
    dt = _sum_dtype(x, dtype)
    totals = _partials(x, _Partial("sum", (axis,), dt), "cumsum-totals")  # nblocks along axis
    nb = x.numblocks[axis]
    t = np.moveaxis(totals, axis, 0)
    before = np.concatenate([np.zeros_like(t[:1]), np.cumsum(t, axis=0, dtype=dt)[:-1]], axis=0)
    offsets = np.moveaxis(before, 0, axis)
    offsets = np.stack([np.take(offsets, [b], axis=axis) for b in range(nb)])
    chunks = list(x.chunks)
    if include_initial:
        chunks[axis] = (chunks[axis][0] + 1,) + tuple(chunks[axis][1:])
    shape = tuple(builtins.sum(c) for c in chunks)
    out = empty(shape, dt, chunks=tuple(chunks), colocate=x)
    starts = np.concatenate([[0], np.cumsum(x.chunks[axis])]).astype(np.int64)
    op = _Prefix(axis, starts, offsets, int(bool(include_initial)), x.shape[axis], dt)
    blockwise.run(op, out, [x], "cumulative_sum")
    return out

