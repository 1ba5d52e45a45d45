"""Statistical functions: sums, products, extremes, means, variances, running sums; and
NumPy's names for them (``amin``/``amax``, the ``nan*`` reductions, ``average``).

Partials on each worker, combined once on the caller and kept there as a host value
until a cluster operation needs it (``_engine.reduction_ops``). ``var``/``std`` take two
passes (the mean, then the squared deviations from it), as NumPy does, so they are as
exact as NumPy's.

Call forms are NumPy's and the standard's at once: ``axis`` (and ``dtype`` where NumPy
has it) may be given by position, as in ``sum(x, 0)``; what NumPy takes after its
``out`` is keyword-only. ``var``/``std`` take ``correction`` (the standard's) or ``ddof``
(NumPy's).

The ``nan*`` reductions replace NaN by the neutral value in the same fused pass as the
reduction (nothing is stored); ``nanmax``/``nanmin`` and ``nanmean`` answer NaN for a
slice of NaN only, with NumPy's RuntimeWarning.
"""

from __future__ import annotations

import builtins
import warnings

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.axes import normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.reduction_ops import (
    Partial, SquaredDeviation, count, cumulative, float_dtype, on_caller, partials, reduce, sum_dtype,
)
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.data_types import astype
from dgvm.array.manipulation import permute_dims, reshape

__all__ = [
    "amax", "amin", "average", "cumulative_sum", "max", "mean", "min", "nanmax", "nanmean",
    "nanmin", "nansum", "prod", "std", "sum", "var",
]


@empty_aware
def sum(x, /, axis=None, dtype=None, *, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (None: all); integers sum in the default integer type."""
    return reduce(x, "sum", axis, keepdims, sum_dtype(x, dtype))


@empty_aware
def prod(x, /, axis=None, dtype=None, *, keepdims=False):
    """Product over ``axis`` (None: all); integers multiply in the default integer type."""
    return reduce(x, "prod", axis, keepdims, sum_dtype(x, dtype, "prod"))


@empty_aware
def max(x, /, axis=None, *, keepdims=False):  # noqa: A001
    """The largest element over ``axis`` (NaN if the slice has one, as NumPy)."""
    return reduce(x, "max", axis, keepdims)


@empty_aware
def min(x, /, axis=None, *, keepdims=False):  # noqa: A001
    """The smallest element over ``axis`` (NaN if the slice has one, as NumPy)."""
    return reduce(x, "min", axis, keepdims)


@empty_aware
def amax(a, /, axis=None, *, keepdims=False):
    """NumPy's other name of ``max``."""
    return reduce(a, "max", axis, keepdims)


@empty_aware
def amin(a, /, axis=None, *, keepdims=False):
    """NumPy's other name of ``min``."""
    return reduce(a, "min", axis, keepdims)


@empty_aware
def mean(x, /, axis=None, dtype=None, *, keepdims=False):
    """Arithmetic mean over ``axis``, summed in ``dtype`` (default: float64 for integers,
    the input's for floating point)."""
    axes = normalize_axis(axis, x.ndim)
    dt = float_dtype(x) if dtype is None else np.dtype(dtype)
    total = np.sum(partials(x, Partial("sum", axes, dt, folds=True), "mean"), axis=axes, keepdims=keepdims, dtype=dt)
    with np.errstate(all="ignore"):
        # (divided as NumPy does, by the count as an integer array scalar: a float16 total
        # divided by a Python int past 65504 would be divided by inf)
        return on_caller((total / np.intp(count(x, axes))).astype(dt), x)


def _correction(correction, ddof, name: str):
    if correction is not None and ddof is not None:
        raise ValueError(f"dgvm.array.{name}: ddof and correction can't be given together")
    return correction if correction is not None else (ddof if ddof is not None else 0.0)


@empty_aware
def var(x, /, axis=None, dtype=None, *, correction=None, keepdims=False, ddof=None):
    """Variance over ``axis``, dividing by ``N - correction`` (``ddof`` is NumPy's name)."""
    correction = _correction(correction, ddof, "var")
    axes = normalize_axis(axis, x.ndim)
    dt = float_dtype(x) if dtype is None else np.dtype(dtype)
    n = count(x, axes)
    m = (np.sum(partials(x, Partial("sum", axes, dt, folds=True), "var-mean"), axis=axes, keepdims=True,
                dtype=dt) / np.intp(n)).astype(dt)
    real = np.empty(0, dt).real.dtype
    ss = np.sum(partials(x, SquaredDeviation(m, axes, dt), "var"), axis=axes, keepdims=keepdims)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # (the sum in the asked dtype first, as NumPy's: a float16 one past 65504 is inf,
        # though the partials were folded in float32)
        out = ss.astype(real) / np.maximum(n - correction, 0)
    return on_caller(out.astype(real), x)


@empty_aware
def std(x, /, axis=None, dtype=None, *, correction=None, keepdims=False, ddof=None):
    """Standard deviation over ``axis``: the square root of ``var``."""
    return apply("sqrt", var(x, axis, dtype, correction=correction, keepdims=keepdims, ddof=ddof))


@empty_aware
def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running sum along ``axis`` (required for arrays of more than one dimension)."""
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"cumulative_sum of a {x.ndim}-d array needs axis=")
        axis = 0
    axis = normalize_axis(axis, x.ndim)[0]
    return cumulative(x, "cumsum", axis, sum_dtype(x, dtype), include_initial)


# -- NumPy's nan* reductions -------------------------------------------------------------------
def without_nan(x, value):
    """``x`` with its NaNs replaced by ``value`` (a deferred elementwise array; ``x`` itself
    when its dtype has no NaN)."""
    if x.dtype.kind not in "fc":
        return x
    return apply("where", apply("isnan", x), value, x)


@empty_aware
def nansum(a, /, axis=None, dtype=None, *, keepdims=False):
    """Sum over ``axis`` with NaNs counted as zero."""
    return sum(without_nan(a, 0), axis, dtype, keepdims=keepdims)


@empty_aware
def nanmean(a, /, axis=None, dtype=None, *, keepdims=False):
    """Mean over ``axis`` of the elements that are not NaN (NaN where there are none)."""
    if a.dtype.kind not in "fc":
        return mean(a, axis, dtype, keepdims=keepdims)
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise TypeError(f"dgvm.array.nanmean: dtype must be inexact for an inexact array, "
                        f"got {np.dtype(dtype)}")
    total = sum(without_nan(a, 0), axis, dtype, keepdims=keepdims)
    n = sum(apply("logical_not", apply("isnan", a)), axis, np.int64, keepdims=keepdims)
    if (n.host_value == 0).any():
        warnings.warn("Mean of empty slice", RuntimeWarning, stacklevel=2)
    with np.errstate(all="ignore"):
        return astype(apply("divide", total, n), total.dtype)


def _nan_extreme(a, fn, axis, keepdims, fill):
    if a.dtype.kind not in "fc":
        return reduce(a, fn, axis, keepdims)
    value = reduce(without_nan(a, fill), fn, axis, keepdims)
    all_nan = reduce(apply("isnan", a), "all", axis, keepdims)
    if not all_nan.host_value.any():
        return value
    warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=3)
    return apply("where", all_nan, np.nan, value)


@empty_aware
def nanmax(a, /, axis=None, *, keepdims=False):
    """The largest element over ``axis``, NaNs ignored (NaN for a slice of NaNs only)."""
    return _nan_extreme(a, "max", axis, keepdims, -np.inf)


@empty_aware
def nanmin(a, /, axis=None, *, keepdims=False):
    """The smallest element over ``axis``, NaNs ignored (NaN for a slice of NaNs only)."""
    return _nan_extreme(a, "min", axis, keepdims, np.inf)


# -- average -----------------------------------------------------------------------------------
def _weights_along(a, w, axis):
    """``w`` shaped to broadcast against ``a``: as it is when the shapes agree, else a
    weight per position along ``axis`` (NumPy's rules and errors)."""
    if w.shape == a.shape:
        return w
    if axis is None:
        raise TypeError("dgvm.array.average: axis must be given when the shapes of a and weights differ")
    axes = normalize_axis(axis, a.ndim, sort=False)
    if w.shape != tuple(a.shape[i] for i in axes):
        raise ValueError(f"dgvm.array.average: weights of shape {w.shape} are not consistent with "
                         f"a of shape {a.shape} along axis {axis}")
    w = permute_dims(w, tuple(np.argsort(axes))) if w.ndim > 1 else w
    return reshape(w, tuple(s if i in axes else 1 for i, s in enumerate(a.shape)))


@empty_aware
def average(a, /, axis=None, weights=None, returned=False, *, keepdims=False):
    """The weighted average over ``axis`` (``mean`` without ``weights``); with
    ``returned``, also the sum of the weights, of the average's shape (NumPy's pair)."""
    if not isinstance(a, ArrayCore):
        raise TypeError(f"dgvm.array.average expects a DArray, got {type(a).__name__}")
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        scl = avg.dtype.type(a.size / builtins.max(avg.size, 1))
    else:
        if not isinstance(weights, ArrayCore):
            raise TypeError(f"dgvm.array.average: weights must be a DArray, got {type(weights).__name__}")
        # NumPy's: integers and bools average in floating point.
        dt = np.result_type(a.dtype, weights.dtype, *([np.float64] if a.dtype.kind in "biu" else []))
        w = _weights_along(a, weights, axis)
        scl = sum(w, axis, dt, keepdims=keepdims)
        if (scl.host_value == 0).any():
            raise ZeroDivisionError("dgvm.array.average: the weights sum to zero, can't be normalized")
        product = apply("multiply", astype(a, dt, copy=False), astype(w, dt, copy=False))
        with np.errstate(all="ignore"):
            avg = apply("divide", sum(product, axis, keepdims=keepdims), scl)
    if not returned:
        return avg
    if not isinstance(scl, ArrayCore) or scl.shape != avg.shape:
        scl = on_caller(np.broadcast_to(np.asarray(scl, avg.dtype), avg.shape).copy(), avg)
    return avg, scl
