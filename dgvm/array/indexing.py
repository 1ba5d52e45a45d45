"""Indexing functions: ``take`` (``x[key]`` and ``x[key] = value`` are DArray's own:
``_engine.getitem``, ``_engine.setitem``)."""

from __future__ import annotations

import numpy as np

from dgvm.array._engine.axes import normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.index_gather import gather_along
from dgvm.array._engine.zero_size import empty_aware

__all__ = ["take"]


@empty_aware
def take(x, indices, /, *, axis=None):
    """Elements of ``x`` at integer ``indices`` (a 1-d DArray or host array) along
    ``axis`` (negative ones count from the end): a gather on the workers; a DArray of
    indices never comes to the caller (``_engine.index_gather``)."""
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"take on a {x.ndim}-d array needs axis=")
        axis = 0
    axis = normalize_axis(axis, x.ndim)[0]
    idx = indices if isinstance(indices, ArrayCore) else np.asarray(indices)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise IndexError(f"take needs a 1-d integer index array, got {idx.dtype} of shape {tuple(idx.shape)}")
    return gather_along(x, axis, idx, "take")
