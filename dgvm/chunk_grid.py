"""Chunk grids: how an n-d shape is cut into blocks, and how many bytes each block holds.

Blocks are numbered in C order over the grid; block ``k`` is chunk ``k`` of the
allocation that backs the array, stored contiguously (C order) in its own buffer.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from dask.array.core import normalize_chunks as _dask_normalize


def normalize(chunks, shape, dtype) -> tuple[tuple[int, ...], ...]:
    """Dask-style chunk spec (int, tuple, "auto", dict) -> tuple of per-axis block sizes."""
    if chunks is None or chunks == "auto":
        if 0 in tuple(shape):  # no elements, one block per axis (Dask's "auto" divides by the size)
            return tuple((int(n),) for n in shape)
        chunks = "auto"
    return _dask_normalize(chunks, shape, dtype=np.dtype(dtype))


def grid_shape(chunks) -> tuple[int, ...]:
    return tuple(len(c) for c in chunks)


def block_nbytes(chunks, itemsize: int) -> np.ndarray:
    """Bytes of every block, in C order of the grid (int64 array)."""
    sizes = np.array([itemsize], dtype=np.int64)
    for axis in chunks:
        sizes = np.multiply.outer(sizes, np.asarray(axis, dtype=np.int64)).ravel()
    return sizes


def block_slices(chunks):
    """For each block in C order: a tuple of slices selecting it from the whole array."""
    starts = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in chunks]
    per_axis = [
        [slice(int(s), int(s) + int(n)) for s, n in zip(st, c)] for st, c in zip(starts, chunks)
    ]
    return list(itertools.product(*per_axis))


def block_index(flat: int, grid: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, grid)) if grid else ()


def nblocks(chunks) -> int:
    return math.prod(len(c) for c in chunks)
