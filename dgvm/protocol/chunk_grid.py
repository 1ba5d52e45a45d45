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
    if chunks is None:
        chunks = "auto"
    if 0 in tuple(shape):  # no elements: "auto" is the whole axis (Dask's divides by the size)
        chunks = _whole_for_auto(chunks)
    return _dask_normalize(chunks, shape, dtype=np.dtype(dtype))


def _whole_for_auto(chunks):
    """``chunks`` with every "auto" (the whole spec, an axis' entry) as -1, the whole axis."""
    if isinstance(chunks, str):
        return -1 if chunks == "auto" else chunks
    if isinstance(chunks, dict):
        return {a: -1 if isinstance(c, str) and c == "auto" else c for a, c in chunks.items()}
    if isinstance(chunks, (tuple, list)):
        return type(chunks)(-1 if isinstance(c, str) and c == "auto" else c for c in chunks)
    return chunks


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
    """The grid position of block ``flat`` (C order). Python ints: a worker's task asks
    this for every chunk it touches, where NumPy's unravel_index costs several times more."""
    block = []
    for n in reversed(grid):
        flat, b = divmod(int(flat), n)
        block.append(b)
    return tuple(reversed(block))


def flat_index(block, grid: tuple[int, ...]) -> int:
    """The C-order number of the block at grid position ``block`` (block_index's inverse)."""
    k = 0
    for b, n in zip(block, grid):
        k = k * n + int(b)
    return k


def nblocks(chunks) -> int:
    return math.prod(len(c) for c in chunks)
