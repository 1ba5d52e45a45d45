"""Reductions: partials on each worker, combined once on the caller.

Each chunk is reduced where it lives (one task per worker, ``blockwise.collect``); the
partials (one value per chunk, or one row per chunk along the kept axes) come back and
are combined in one step, then kept on the caller as a host value (``deferred``), stored
in device memory only when a cluster operation needs it. Here: the partial ops, their
collection in block order and the combining steps the statistical and searching
functions share.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import axis_sums, blockwise
from dgvm.array._engine.axes import normalize_axis
from dgvm.backends import working_memory


def on_caller(value, like):
    """A value combined here, kept here until a cluster operation needs it (a host value
    of ``like``'s class and cluster)."""
    return type(like).on_caller(value, like.client)


# The reductions whose partials of blocks along the reduced axes combine into one, by
# NumPy's (and CuPy's) ufunc of the same name.
FOLDS = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum",
         "any": "logical_or", "all": "logical_and"}


@dataclass(frozen=True)
class Fold:
    """How the partials of blocks that differ only along a reduction's ``axes`` combine
    into one, with ``ufunc``: first on the worker that made them, then on the caller, so
    that each worker sends one partial per block of the reduced grid (``grid``), not one
    per chunk (``blockwise.collect``)."""

    ufunc: str
    axes: tuple

    def block(self, block: tuple) -> tuple:
        """The block of the reduced grid that ``block``'s partial goes into."""
        return tuple(0 if i in self.axes else b for i, b in enumerate(block))

    def grid(self, numblocks: tuple) -> tuple:
        return tuple(1 if i in self.axes else n for i, n in enumerate(numblocks))

    def add(self, total, partial, xp):
        """``partial`` combined into ``total`` (None: nothing yet) with ``xp``'s ufunc."""
        if total is None:
            return partial
        if self.ufunc in ("add", "multiply") and total.dtype == np.float16:
            # (a sum asked in float16: folded in float32, as NumPy adds each run of
            # float16 values in float32; in float16 a running total past 2048 stops
            # taking small partials. The caller's last step casts to float16.)
            total = total.astype(np.float32)
        with np.errstate(all="ignore"):
            return getattr(xp, self.ufunc)(total, partial)


@dataclass
class Partial:
    """Per chunk: NumPy's reduction ``fn`` over ``axes``, keeping them (length 1). With
    ``folds``, the partials along ``axes`` are combined where they are made (``fold``);
    without (a running total needs each block's), every block's comes back."""

    fn: str
    axes: tuple
    dtype: object
    folds: bool = False

    @property
    def fold(self) -> Fold | None:
        return Fold(FOLDS[self.fn], self.axes) if self.folds and self.fn in FOLDS else None

    @property
    def reduction(self):
        """What a fused kernel over a deferred tree ends with (``fused``)."""
        return self.fn, self.axes, self.dtype

    def partial(self, chunk, lo, hi, xp):
        with np.errstate(all="ignore"):
            if self.fn == "sum":
                return axis_sums.sums(chunk, self.axes, self.dtype, xp)
            kw = {} if self.dtype is None else {"dtype": self.dtype}
            return getattr(xp, self.fn)(chunk, axis=self.axes, keepdims=True, **kw)


def partials(x, op, name: str) -> np.ndarray:
    """Every chunk's partial (computed where it lives), assembled in block order; those
    along the reduced axes combined into one where ``op`` has a ``fold``."""
    fold = getattr(op, "fold", None)
    return blockwise.assemble(blockwise.collect(op, x, name),
                              x.numblocks if fold is None else fold.grid(x.numblocks))


def reduce(x, fn: str, axis, keepdims: bool, dtype=None):
    """NumPy's ``fn`` of ``x`` over ``axis``: per chunk, then of the partials."""
    axes = normalize_axis(axis, x.ndim)
    whole = partials(x, Partial(fn, axes, dtype, folds=True), fn)
    with np.errstate(all="ignore"):
        kw = {"dtype": dtype} if dtype is not None else {}
        value = getattr(np, fn)(whole, axis=axes, keepdims=keepdims, **kw)
    return on_caller(value, x)


def sum_dtype(x, dtype, fn="sum"):
    """The dtype of NumPy's ``fn`` (sum, prod) of ``x`` unless ``dtype`` is given."""
    if dtype is not None:
        return np.dtype(dtype)
    return _result_dtype(fn, np.dtype(x.dtype))


def float_dtype(x):
    """The dtype of NumPy's mean of ``x``."""
    return _result_dtype("mean", np.dtype(x.dtype))


@functools.lru_cache(maxsize=256)
def _result_dtype(fn: str, dtype: np.dtype) -> np.dtype:
    """The dtype of NumPy's ``fn`` of an array of ``dtype``, asked of NumPy once."""
    return getattr(np, fn)(np.ones(1, dtype=dtype)).dtype


def count(x, axes) -> int:
    """How many elements of ``x`` a reduction over ``axes`` combines into each value."""
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


@dataclass
class SquaredDeviation:
    """Per chunk: the sum of squared deviations from ``mean`` (variance's second pass)."""

    mean: np.ndarray  # keepdims shape: 1 along the reduced axes
    axes: tuple
    dtype: object

    @property
    def fold(self) -> Fold:
        return Fold("add", self.axes)

    def partial(self, chunk, lo, hi, xp):
        # The deviations take a few chunks' worth: rows along axis 0 at a time, within the
        # working-memory budget, their sums added (axis 0 reduced) or put one after another.
        if chunk.ndim == 0:
            return self._rows(chunk, lo, hi, xp)
        row = math.prod(chunk.shape[1:]) * 3 * np.dtype(self.dtype).itemsize
        working_memory.need(row, f"the deviations of a row of {chunk.shape[1:]} ({self.dtype})")
        rows = max(1, working_memory.budget() // max(row, 1))
        if rows >= chunk.shape[0]:
            return self._rows(chunk, lo, hi, xp)
        parts = []
        for r0 in range(0, chunk.shape[0], rows):
            r1 = min(chunk.shape[0], r0 + rows)
            parts.append(self._rows(chunk[r0:r1], (lo[0] + r0, *lo[1:]), (lo[0] + r1, *hi[1:]), xp))
        if 0 in self.axes:
            return functools.reduce(lambda total, part: self.fold.add(total, part, xp), parts)
        return xp.concatenate(parts, axis=0)

    def _rows(self, chunk, lo, hi, xp):
        sl = tuple(slice(0, 1) if self.mean.shape[a] == 1 else slice(lo[a], hi[a])
                   for a in range(chunk.ndim))
        d = chunk.astype(self.dtype) - xp.asarray(self.mean[sl])
        d = (d * d.conj()).real if xp.iscomplexobj(d) else d * d
        return xp.sum(d, axis=self.axes, keepdims=True)


@dataclass
class ArgPartial:
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


def arg_reduce(x, fn: str, axis, keepdims: bool):
    """NumPy's ``argmin``/``argmax`` (``fn``) of ``x``: per chunk, then of the candidates."""
    if axis is not None:
        axis = normalize_axis(axis, x.ndim)[0]
    parts = blockwise.collect(ArgPartial(fn, axis, x.shape), x, fn)
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
    return on_caller(np.asarray(out, dtype=np.int64), x)


@dataclass
class Prefix:
    """Blockwise op of a running sum or product (``fn``: "cumsum", "cumprod"): the chunk's
    own running value combined with the totals of the blocks before it along ``axis``
    (``offsets[b]``, one cross-section per block)."""

    fn: str
    axis: int
    starts: np.ndarray  # block starts of the input along axis
    offsets: np.ndarray  # (nblocks, *cross-section), keepdims along axis
    shift: int  # 1 with include_initial
    n: int
    dtype: object

    def block(self, read, lo, hi, xp):
        a = self.axis
        xlo, xhi = list(lo), list(hi)
        xlo[a], xhi[a] = max(lo[a] - self.shift, 0), min(hi[a] - self.shift, self.n)
        b = int(np.searchsorted(self.starts, xlo[a], side="right")) - 1
        cross = tuple(slice(0, 1) if i == a else slice(lo[i], hi[i]) for i in range(len(lo)))
        base = xp.asarray(self.offsets[b][cross])
        shape = [h - l for l, h in zip(lo, hi)]
        out = xp.empty(shape, dtype=self.dtype)
        first = 1 if lo[a] == 0 and self.shift else 0
        if first:
            out[tuple(slice(0, 1) if i == a else slice(None) for i in range(len(lo)))] = _RUNNING[self.fn][1]
        if xhi[a] > xlo[a]:
            run = getattr(xp, self.fn)(read(0, xlo, xhi), axis=a, dtype=self.dtype)
            run = run + base if self.fn == "cumsum" else run * base
            out[tuple(slice(first, None) if i == a else slice(None) for i in range(len(lo)))] = run
        return out


# A running function: the reduction that totals a block, and its identity.
_RUNNING = {"cumsum": ("sum", 0), "cumprod": ("prod", 1)}


def cumulative(x, fn: str, axis: int, dtype, include_initial: bool = False):
    """NumPy's running ``fn`` ("cumsum", "cumprod") of ``x`` along ``axis`` in ``dtype``:
    every block's total comes back (one cross-section per block), the caller scans them,
    and each output chunk is made on its worker from its input chunk and the blocks'
    totals before it. With ``include_initial`` the result starts with the identity."""
    total, identity = _RUNNING[fn]
    totals = partials(x, Partial(total, (axis,), dtype), f"{fn}-totals")  # nblocks along axis
    t = np.moveaxis(totals, axis, 0)
    with np.errstate(all="ignore"):
        scan = getattr(np, fn)(t, axis=0, dtype=dtype)[:-1]
    before = np.concatenate([np.full_like(t[:1], identity, dtype=dtype), scan], axis=0)
    offsets = np.moveaxis(before, 0, axis)
    offsets = np.stack([np.take(offsets, [b], axis=axis) for b in range(x.numblocks[axis])])
    chunks = list(x.chunks)
    if include_initial:
        chunks[axis] = (chunks[axis][0] + 1,) + tuple(chunks[axis][1:])
    shape = tuple(sum(c) for c in chunks)
    out = type(x).allocated(shape, dtype, chunks=tuple(chunks), colocate=x, client=x.client, zero=False)
    starts = np.concatenate([[0], np.cumsum(x.chunks[axis])]).astype(np.int64)
    op = Prefix(fn, axis, starts, offsets, int(bool(include_initial)), x.shape[axis], dtype)
    blockwise.run(op, out, [x], fn)
    return out
