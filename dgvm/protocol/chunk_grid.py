"""Chunk grids: how an n-d shape is cut into blocks, and how many bytes each block holds.

Blocks are numbered in C order over the grid; block ``k`` is chunk ``k`` of the
allocation that backs the array, stored contiguously (C order) in its own buffer.
"""

from __future__ import annotations

import functools
import itertools
import math

import dask
import numpy as np
from dask.array.core import normalize_chunks as _dask_normalize
from dask.utils import parse_bytes

from dgvm.protocol.arguments import is_integer, shown
from dgvm.protocol.errors import InvalidArgument, InvalidArgumentType


def normalize(chunks, shape, dtype, max_blocks: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Dask-style chunk spec (int, tuple, "auto", dict) -> tuple of per-axis block sizes.
    An array of more than 2**63 bytes, or a spec of more than about ``max_blocks`` blocks,
    is refused before any block is listed (a list of billions of blocks fills memory)."""
    if chunks is None:
        chunks = "auto"
    _check_spec(chunks, len(tuple(shape)))
    nbytes = math.prod(tuple(shape)) * np.dtype(dtype).itemsize
    if nbytes > 2**63 - 1:
        raise InvalidArgument(f"array is too big: shape {tuple(shape)} of {np.dtype(dtype)} holds {nbytes} bytes")
    n = _about_how_many_blocks(chunks, tuple(shape), nbytes)
    if max_blocks is not None and n is not None and n > max_blocks:
        raise InvalidArgument(
            f"chunks {chunks!r} cut shape {tuple(shape)} into about {n} blocks; at most {max_blocks} "
            "are allowed (dgvm.max-chunks): use larger chunks")
    if 0 in tuple(shape):  # no elements: "auto" is the whole axis (Dask's divides by the size)
        chunks = _whole_for_auto(chunks)
    try:
        grid = _dask_normalize(chunks, shape, dtype=np.dtype(dtype))
    except ValueError as e:  # chunks that do not add up to the shape, a bad byte size
        raise InvalidArgument(f"chunks {chunks!r} do not fit shape {tuple(shape)}: {e}") from None
    if len(grid) != len(tuple(shape)) or any(b <= 0 for axis, n in zip(grid, shape) if n for b in axis):
        raise InvalidArgument(f"chunks {chunks!r} do not cut shape {tuple(shape)} into blocks")
    return grid


def auto(shape, dtype) -> tuple[tuple[int, ...], ...]:
    """``normalize("auto", shape, dtype)``, kept per shape, dtype and Dask's
    ``array.chunk-size`` (each small value a reduction brings back asks for one)."""
    return _auto(tuple(int(n) for n in shape), np.dtype(dtype), str(dask.config.get("array.chunk-size")))


@functools.lru_cache(maxsize=1024)
def _auto(shape: tuple, dtype: np.dtype, chunk_size: str):
    return normalize("auto", shape, dtype)


def _about_how_many_blocks(chunks, shape: tuple, nbytes: int) -> int | None:
    """How many blocks ``chunks`` cuts ``shape`` into, about (an axis left to "auto"
    counts as one block); None if the spec does not say (a byte size Dask cannot read)."""
    if isinstance(chunks, str):
        try:
            per = parse_bytes(dask.config.get("array.chunk-size") if chunks == "auto" else chunks)
        except (ValueError, TypeError):
            return None
        return -(-nbytes // max(per, 1))
    if isinstance(chunks, dict):
        entries = [chunks.get(a, chunks.get(a - len(shape))) for a in range(len(shape))]
    elif isinstance(chunks, (tuple, list)):
        entries = list(chunks)
    else:
        entries = [chunks] * len(shape)
    count = 1
    for n, c in zip(shape, entries):
        if isinstance(c, (tuple, list)):
            count *= max(len(c), 1)
        elif is_integer(c) and c > 0:
            count *= max(-(-n // c), 1)
    return count


def _check_spec(chunks, ndim: int) -> None:
    """Refuse what Dask's ``normalize_chunks`` would take wrongly (True, a dict with keys
    that are no axes), loop on (NaN) or divide by (0)."""
    def entry(c, where):  # one axis: a block length (-1: the whole axis), "auto", None or lengths
        if c is None or isinstance(c, str):
            return
        if isinstance(c, (tuple, list)):
            if not all(is_integer(b) and b >= 0 for b in c):
                raise InvalidArgument(f"chunks{where} must hold block lengths >= 0, got {c!r}")
            return
        if not is_integer(c):
            raise InvalidArgumentType(f"chunks{where} must be an integer, a tuple of block lengths, "
                                      f"'auto' or None, got {shown(c)}")
        if c == 0 or c < -1:
            raise InvalidArgument(f"chunks{where} must be a block length > 0 (or -1: the whole axis), got {c}")

    if isinstance(chunks, str):
        return
    if isinstance(chunks, np.ndarray):  # block lengths, as Dask reads them
        if chunks.dtype.kind not in "iu" or (chunks < 0).any():
            raise InvalidArgument(f"chunks as an array must hold block lengths >= 0, got {chunks!r}")
        return
    if isinstance(chunks, dict):
        for axis, c in chunks.items():
            if not is_integer(axis) or not -ndim <= axis < ndim:
                raise InvalidArgument(f"chunks names axis {axis!r} of an array of {ndim} dimensions")
            entry(c, f"[{axis}]")
    elif isinstance(chunks, (tuple, list)):
        for axis, c in enumerate(chunks):
            entry(c, f"[{axis}]")
    else:
        entry(chunks, "")


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
