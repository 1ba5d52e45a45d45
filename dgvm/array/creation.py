"""Creating DArrays and moving them to and from NumPy."""

from __future__ import annotations

import numpy as np

from dgvm import chunk_grid
from dgvm.array.darray import DArray
from dgvm.allocation import Allocation
from dgvm.buffer import placement_request


def _shape(shape) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(int(s) < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    if any(int(s) == 0 for s in shape):
        raise ValueError(f"shape {shape} has no elements; dgvm allocations need at least one")
    return tuple(int(s) for s in shape)


def empty(shape, dtype="float64", chunks="auto", placement=None, colocate=None, client=None) -> DArray:
    """A new array in global device memory (its memory is zero-filled on allocation)."""
    shape = _shape(shape)
    dtype = np.dtype(dtype)
    grid = chunk_grid.normalize(chunks, shape, dtype)
    alloc = Allocation.create(
        client, shape=list(shape), dtype=dtype.str, chunks=[list(c) for c in grid],
        **placement_request(placement, colocate),
    )
    return DArray(alloc, shape, dtype, grid)


def zeros(shape, dtype="float64", chunks="auto", placement=None, colocate=None, client=None) -> DArray:
    """An array of zeros in global device memory."""
    return empty(shape, dtype, chunks, placement, colocate, client)


def from_numpy(a, chunks="auto", placement=None, colocate=None, client=None) -> DArray:
    """Copy a NumPy array into global device memory, cut into ``chunks``."""
    a = np.asarray(a)
    x = empty(a.shape, a.dtype, chunks, placement, colocate, client)
    try:
        x.write_blocks(a)
    except BaseException:
        x.free()
        raise
    return x


def asnumpy(x: DArray) -> np.ndarray:
    """Gather a DArray into a new NumPy array on the caller."""
    return x.to_numpy()
