"""NumPy's order statistics: ``median``, ``percentile``, ``quantile``.

The array is sorted along the reduced axis on the workers (``sort``: NaN last; several
axes are first moved to the end and merged into one, ``axis=None`` flattens), the
cross-sections at the ranks needed are gathered where they lie (``take``), and the
result is one elementwise pass over them: NumPy's own formulas, so the values and the
dtypes are NumPy's. ``median`` is the mean of the one or two middle elements, as
NumPy's; ``quantile`` NumPy's default ``method="linear"`` (its ``_lerp``: ``a + (b - a) *
g``, or ``b - (b - a) * (1 - g)`` from ``g = 0.5`` on). A slice holding a NaN gives NaN.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.axes import normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.reduction_ops import float_dtype
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.data_types import astype
from dgvm.array.indexing import take
from dgvm.array.manipulation import moveaxis, permute_dims, reshape
from dgvm.array.sorting import check_array, sort
from dgvm.protocol.errors import NotSupported

__all__ = ["median", "percentile", "quantile"]

# NumPy's methods of quantile; dgvm.array runs its default one.
_METHODS = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation", "interpolated_inverted_cdf",
            "hazen", "weibull", "linear", "median_unbiased", "normal_unbiased", "lower", "higher",
            "midpoint", "nearest")


def result_shape(a, axis, keepdims: bool) -> tuple:
    """The shape around the reduced axes: without them, or with length 1 there."""
    axes = normalize_axis(axis, a.ndim)
    return tuple(1 if i in axes else n for i, n in enumerate(a.shape) if keepdims or i not in axes)


class _Sorted:
    """``a`` sorted along the reduced axes (merged into one, ``axis``) and the shape the
    result has around them (``rest``; ``kept``: with ``keepdims``)."""

    def __init__(self, a, axis, keepdims: bool):
        axes = normalize_axis(axis, a.ndim)
        keep = [i for i in range(a.ndim) if i not in axes]
        if axis is not None and len(axes) == 1:
            self.values, self.axis = sort(a, axis=axes[0]), axes[0]
        else:
            merged = permute_dims(a, tuple(keep) + axes) if keep + list(axes) != list(range(a.ndim)) else a
            merged = reshape(merged, tuple(a.shape[i] for i in keep) + (-1,))
            self.values, self.axis = sort(merged, axis=-1), len(keep)
        self.n = self.values.shape[self.axis]
        self.rest = tuple(a.shape[i] for i in keep)
        self.kept = result_shape(a, axis, keepdims)

    def at(self, ranks):
        """The cross-sections at ``ranks`` (a list), stacked along a first axis."""
        return moveaxis(take(self.values, list(ranks), axis=self.axis), self.axis, 0)

    def shaped(self, result, lead: tuple = ()):
        """``result`` (``lead`` + rest) with the shape NumPy gives: ``lead`` + kept."""
        return reshape(result, lead + self.kept)


def _nan_last(s: _Sorted, result, shape_of_one):
    """``result`` with NaN (the slice's own, cast) where a slice holds one: it is last."""
    last = reshape(s.at([s.n - 1]), shape_of_one)
    return apply("where", apply("isnan", last), last, result)


@empty_aware
def median(a, /, axis=None, *, overwrite_input=False, keepdims=False):
    """The median along ``axis`` (None: of all elements; a tuple: of those axes): the
    middle element, or the mean of the two middle ones, in ``mean``'s dtype."""
    check_array(a, "median")
    if a.ndim == 0:
        return astype(a, float_dtype(a), copy=True)
    s = _Sorted(a, axis, keepdims)
    dt = float_dtype(a)
    half = s.n // 2
    ranks = [half] if s.n % 2 else [half - 1, half]
    picked = s.at(ranks)
    if len(ranks) == 1:
        result = astype(reshape(picked, s.rest), dt)
    else:
        total = apply("add", astype(picked[0], dt), astype(picked[1], dt))
        result = astype(apply("divide", total, 2), dt)
    if a.dtype.kind in "fc":
        result = _nan_last(s, result, s.rest)
    return s.shaped(result)


def _quantile(a, q, axis, method, keepdims, weights, name: str, scale: float):
    check_array(a, name)
    if a.dtype.kind == "c":
        raise TypeError(f"dgvm.array.{name}: a must be an array of real numbers, got {a.dtype}")
    weak = type(q) in (int, float)  # NumPy's: a Python number promotes weakly
    if isinstance(q, ArrayCore):
        q = q.to_numpy()  # the fractions decide which ranks are read: a few numbers
    with np.errstate(all="ignore"):
        q = np.true_divide(q, scale) if scale != 1 else np.asanyarray(q)
    if q.dtype == object or q.dtype.kind not in "biuf":
        raise TypeError(f"dgvm.array.{name}: q must be real numbers, got {q.dtype}")
    if q.size and not (q.min() >= 0 and q.max() <= 1):
        bound = "[0, 100]" if scale == 100 else "[0, 1]"
        raise ValueError(f"dgvm.array.{name}: {'Percentiles' if scale == 100 else 'Quantiles'} must be "
                         f"in the range {bound}")
    if q.ndim > 2:
        raise ValueError(f"dgvm.array.{name}: q must be a scalar or 1d")
    if method not in _METHODS:
        raise ValueError(f"dgvm.array.{name}: {method!r} is not a valid method. Use one of: {_METHODS}")
    if method != "linear" or weights is not None:
        what = f"method={method!r}" if method != "linear" else "weights="
        raise NotSupported(f"dgvm.array.{name}({what}) is not supported by dgvm.array; it runs "
                           "NumPy's default method='linear'")
    if q.size == 0:  # no quantile: nothing to read; NumPy's dtype, from one stand-in element
        dtype = np.quantile(np.zeros(1, a.dtype), q).dtype
        return type(a).empty_on_caller(q.shape + result_shape(a, axis, keepdims), dtype, a.client)
    s = _Sorted(a, axis, keepdims)
    flat = q.reshape(-1)
    index = (s.n - 1) * flat  # NumPy's virtual indices
    if index.dtype.kind in "iu":  # whole ranks: taken as they are
        result = s.at(index.tolist())
    else:
        before = np.floor(index)
        after = before + 1
        top = index >= s.n - 1
        before[top] = after[top] = -1  # the last element, with NumPy's gamma
        gamma = index - before
        ranks = [int(r) % s.n for r in before], [int(r) % s.n for r in after]
        low, high = s.at(ranks[0]), s.at(ranks[1])
        if a.dtype.kind in "biu":  # NumPy interpolates integers in float64 (CuPy's weak
            # promotion would take float16 for uint8 and a Python float)
            low, high = astype(low, np.float64), astype(high, np.float64)
        step = apply("subtract", high, low)
        if q.ndim == 0 and weak:  # a Python float, as NumPy's gamma is then
            g = float(gamma[0])
            result = (apply("subtract", high, apply("multiply", step, 1 - g)) if g >= 0.5
                      else apply("add", low, apply("multiply", step, g)))
        else:  # strong float64s, as NumPy's gamma array is, one per q along the first axis
            column = (-1,) + (1,) * len(s.rest)
            g, rest_of_g = (type(a).from_host(v.reshape(column), client=a.client) for v in (gamma, 1 - gamma))
            up = apply("subtract", high, apply("multiply", step, rest_of_g))
            down = apply("add", low, apply("multiply", step, g))
            result = apply("where", apply("greater_equal", g, 0.5), up, down)
    if a.dtype.kind == "f":
        if not s.rest and q.ndim == 0 and result.dtype != a.dtype:
            # NumPy answers one quantile of a slice holding a NaN with that NaN itself, in
            # a's dtype (not the float64 of a strong q): a dtype known from one element.
            last = s.at([s.n - 1])
            if np.isnan(last.to_numpy()).any():
                result = last
        result = _nan_last(s, result, (1,) + s.rest)
    return s.shaped(reshape(result, q.shape + s.rest), q.shape)


@empty_aware
def quantile(a, q, /, axis=None, *, overwrite_input=False, method="linear", keepdims=False,
             weights=None):
    """The ``q``-th quantiles (``q`` in [0, 1], a number or a sequence of them) along
    ``axis``; the dimensions of ``q`` come first in the result."""
    return _quantile(a, q, axis, method, keepdims, weights, "quantile", 1)


@empty_aware
def percentile(a, q, /, axis=None, *, overwrite_input=False, method="linear", keepdims=False,
               weights=None):
    """The ``q``-th percentiles (``q`` in [0, 100]) along ``axis``: ``quantile`` of
    ``q / 100``."""
    return _quantile(a, q, axis, method, keepdims, weights, "percentile", 100)
