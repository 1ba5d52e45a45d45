"""Utility functions: ``all`` and ``any`` (partials on each worker, combined on the
caller); NumPy's ``allclose`` and ``array_equal``, an ``all`` over one fused elementwise
comparison. Their answers are 0-d bool DArrays held on the caller (``bool(...)`` reads
them without a request)."""

from __future__ import annotations

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.reduction_ops import reduce
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.elementwise import isclose

__all__ = ["all", "allclose", "any", "array_equal"]


@empty_aware
def all(x, /, axis=None, *, keepdims=False):  # noqa: A001
    """Whether every element over ``axis`` is true (nonzero)."""
    return reduce(x, "all", axis, keepdims)


@empty_aware
def any(x, /, axis=None, *, keepdims=False):  # noqa: A001
    """Whether some element over ``axis`` is true (nonzero)."""
    return reduce(x, "any", axis, keepdims)


@empty_aware
def allclose(a, b, /, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element of ``a`` is close to ``b`` (``isclose``): a 0-d bool DArray."""
    return all(isclose(a, b, rtol, atol, equal_nan))


@empty_aware
def array_equal(a1, a2, /, equal_nan=False):
    """Whether ``a1`` and ``a2`` have one shape and equal elements (NaNs equal to each
    other with ``equal_nan``): a 0-d bool DArray."""
    arrays = [a for a in (a1, a2) if isinstance(a, ArrayCore)]
    if not arrays:
        raise TypeError("dgvm.array.array_equal needs at least one DArray argument")
    for name, a in (("a1", a1), ("a2", a2)):
        if not isinstance(a, (ArrayCore, bool, int, float, complex, np.generic)):
            raise TypeError(f"dgvm.array.array_equal: {name} must be a DArray or a scalar, "
                            f"got {type(a).__name__}")
    if getattr(a1, "shape", ()) != getattr(a2, "shape", ()):  # a scalar's is ()
        return type(arrays[0]).on_caller(np.asarray(False), arrays[0].client)
    same = apply("equal", a1, a2)
    if equal_nan:
        same = apply("logical_or", same, apply("logical_and", apply("isnan", a1), apply("isnan", a2)))
    return all(same)
