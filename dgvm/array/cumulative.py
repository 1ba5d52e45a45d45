"""NumPy's running sums and products along an axis, and differences, their inverse:
``cumsum``, ``cumprod``, ``nancumsum``, ``diff``.

A running function returns every block's total to the caller (one cross-section per
block), which scans them; each output chunk is then made on its worker from its input
chunk and the totals of the blocks before it (``_engine.reduction_ops.cumulative``, as
``cumulative_sum``). ``axis=None`` runs over the flattened array, as NumPy's does.
``diff`` is slices and a subtraction: deferred views and one elementwise pass.
"""

from __future__ import annotations

import operator

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.axes import normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.reduction_ops import cumulative, sum_dtype
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.manipulation import broadcast_to, concat, reshape
from dgvm.array.sorting import check_array
from dgvm.array.statistical import without_nan

__all__ = ["cumprod", "cumsum", "diff", "nancumsum"]


def _running(a, fn: str, axis, dtype, name: str):
    check_array(a, name)
    axis = None if axis is None else normalize_axis(axis, a.ndim)[0]
    if axis is None or a.ndim == 0:  # a 0-d array runs as one of one element, as in NumPy
        a, axis = reshape(a, (-1,)), 0
    return cumulative(a, fn, axis, sum_dtype(a, dtype, "sum" if fn == "cumsum" else "prod"))


@empty_aware
def cumsum(a, /, axis=None, dtype=None):
    """Running sum along ``axis`` (None: over the flattened array); integers sum in the
    default integer type."""
    return _running(a, "cumsum", axis, dtype, "cumsum")


@empty_aware
def cumprod(a, /, axis=None, dtype=None):
    """Running product along ``axis`` (None: over the flattened array)."""
    return _running(a, "cumprod", axis, dtype, "cumprod")


@empty_aware
def nancumsum(a, /, axis=None, dtype=None):
    """Running sum along ``axis`` with NaNs counted as zero."""
    check_array(a, "nancumsum")
    return _running(without_nan(a, 0), "cumsum", axis, dtype, "nancumsum")


_NOTHING = object()  # no prepend/append (None is a value NumPy would take)


def _edge(a, value, axis: int, name: str):
    """``prepend``/``append`` as an array to join to ``a`` along ``axis``: a scalar (or a
    0-d array) is broadcast to one slice of ``a``."""
    if not isinstance(value, ArrayCore):
        value = np.asarray(value)
        if value.dtype == object:
            raise TypeError(f"dgvm.array.diff: {name} must be a scalar or an array, "
                            f"got {type(value).__name__}")
        value = type(a).from_host(value, client=a.client)
    if value.ndim == 0:
        shape = list(a.shape)
        shape[axis] = 1
        value = broadcast_to(value, tuple(shape))
    return value


@empty_aware
def diff(a, /, n=1, axis=-1, prepend=_NOTHING, append=_NOTHING):
    """The ``n``-th difference along ``axis`` (``a[1:] - a[:-1]``, repeated ``n`` times;
    ``!=`` for booleans), after joining ``prepend`` and ``append`` to ``a`` along it."""
    check_array(a, "diff")
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"dgvm.array.diff: order must be non-negative but got {n}")
    if a.ndim == 0:
        raise ValueError("dgvm.array.diff requires input that is at least one dimensional")
    axis = normalize_axis(axis, a.ndim)[0]
    if n == 0:
        return a
    parts = [a]
    if prepend is not _NOTHING:
        parts.insert(0, _edge(a, prepend, axis, "prepend"))
    if append is not _NOTHING:
        parts.append(_edge(a, append, axis, "append"))
    if len(parts) > 1:
        a = concat(parts, axis=axis)
    op = "not_equal" if a.dtype == np.bool_ else "subtract"
    later = tuple(slice(1, None) if i == axis else slice(None) for i in range(a.ndim))
    earlier = tuple(slice(None, -1) if i == axis else slice(None) for i in range(a.ndim))
    for _ in range(n):
        a = apply(op, a[later], a[earlier])
    return a
