"""Utility functions: ``all`` and ``any`` (partials on each worker, combined on the caller)."""

from __future__ import annotations

from dgvm.array._engine.reduction_ops import reduce
from dgvm.array._engine.zero_size import empty_aware

__all__ = ["all", "any"]


@empty_aware
def all(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return reduce(x, "all", axis, keepdims)


@empty_aware
def any(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return reduce(x, "any", axis, keepdims)
