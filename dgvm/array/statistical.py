"""Statistical functions: sums, products, extremes, means, variances, running sums.

Partials on each worker, combined once on the caller and kept there as a host value
until a cluster operation needs it (``_engine.reduction_ops``). ``var``/``std`` take two
passes (the mean, then the squared deviations from it), as NumPy does, so they are as
exact as NumPy's.
"""

from __future__ import annotations

import builtins
import warnings

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.axes import normalize_axis
from dgvm.array._engine.reduction_ops import (
    Partial, Prefix, SquaredDeviation, count, float_dtype, on_caller, partials, reduce, sum_dtype,
)
from dgvm.array._engine.zero_size import empty_aware

__all__ = ["cumulative_sum", "max", "mean", "min", "prod", "std", "sum", "var"]


@empty_aware
def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (None: all); integers sum in the default integer type."""
    return reduce(x, "sum", axis, keepdims, sum_dtype(x, dtype))


@empty_aware
def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    return reduce(x, "prod", axis, keepdims, sum_dtype(x, dtype, "prod"))


@empty_aware
def max(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return reduce(x, "max", axis, keepdims)


@empty_aware
def min(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return reduce(x, "min", axis, keepdims)


@empty_aware
def mean(x, /, *, axis=None, keepdims=False):
    """Arithmetic mean over ``axis``."""
    axes = normalize_axis(axis, x.ndim)
    dt = float_dtype(x)
    total = np.sum(partials(x, Partial("sum", axes, dt), "mean"), axis=axes, keepdims=keepdims, dtype=dt)
    with np.errstate(all="ignore"):
        return on_caller((total / count(x, axes)).astype(dt), x)


@empty_aware
def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    """Variance over ``axis``, dividing by ``N - correction``."""
    axes = normalize_axis(axis, x.ndim)
    dt = float_dtype(x)
    n = count(x, axes)
    m = np.sum(partials(x, Partial("sum", axes, dt), "var-mean"), axis=axes, keepdims=True, dtype=dt) / n
    ss = np.sum(partials(x, SquaredDeviation(m, axes, dt), "var"), axis=axes, keepdims=keepdims)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = ss / np.maximum(n - correction, 0)
    return on_caller(out.astype(np.empty(0, dt).real.dtype), x)


@empty_aware
def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    return apply("sqrt", var(x, axis=axis, correction=correction, keepdims=keepdims))


@empty_aware
def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running sum along ``axis`` (required for arrays of more than one dimension)."""
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"cumulative_sum of a {x.ndim}-d array needs axis=")
        axis = 0
    axis = normalize_axis(axis, x.ndim)[0]
    dt = sum_dtype(x, dtype)
    totals = partials(x, Partial("sum", (axis,), dt), "cumsum-totals")  # nblocks along axis
    nb = x.numblocks[axis]
    t = np.moveaxis(totals, axis, 0)
    before = np.concatenate([np.zeros_like(t[:1]), np.cumsum(t, axis=0, dtype=dt)[:-1]], axis=0)
    offsets = np.moveaxis(before, 0, axis)
    offsets = np.stack([np.take(offsets, [b], axis=axis) for b in range(nb)])
    chunks = list(x.chunks)
    if include_initial:
        chunks[axis] = (chunks[axis][0] + 1,) + tuple(chunks[axis][1:])
    shape = tuple(builtins.sum(c) for c in chunks)
    out = type(x).allocated(shape, dt, chunks=tuple(chunks), colocate=x)
    starts = np.concatenate([[0], np.cumsum(x.chunks[axis])]).astype(np.int64)
    op = Prefix(axis, starts, offsets, int(bool(include_initial)), x.shape[axis], dt)
    blockwise.run(op, out, [x], "cumulative_sum")
    return out
