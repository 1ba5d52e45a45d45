"""Indexing functions: ``take`` (``x[key]`` and ``x[key] = value`` are DArray's own:
``_engine.getitem``, ``_engine.setitem``)."""

from __future__ import annotations

import numpy as np

from dgvm.array._engine.axes import normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.gather import take_along_maps
from dgvm.array._engine.zero_size import empty_aware

__all__ = ["take"]


@empty_aware
def take(x, indices, /, *, axis=None):
    """Elements of ``x`` at integer ``indices`` along ``axis`` (negative ones count from
    the end): a gather, each output chunk made beside the input chunk it reads."""
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"take on a {x.ndim}-d array needs axis=")
        axis = 0
    axis = normalize_axis(axis, x.ndim)[0]
    idx = np.asarray(indices.to_numpy() if isinstance(indices, ArrayCore) else indices)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise IndexError(f"take needs a 1-d integer index array, got {idx.dtype} of shape {idx.shape}")
    n = x.shape[axis]
    if ((idx < -n) | (idx >= n)).any():
        raise IndexError(f"index out of bounds for axis {axis} of length {n}")
    idx = np.where(idx < 0, idx + n, idx)
    return take_along_maps(x, [idx if a == axis else None for a in range(x.ndim)], "take")
