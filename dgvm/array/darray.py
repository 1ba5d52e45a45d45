"""``DArray``: an n-d array whose blocks are the chunks of one GVAT allocation."""

from __future__ import annotations

import math
import weakref

import numpy as np

from dgvm import chunk_grid
from dgvm.allocation import Allocation


# Live arrays, so that dgvm.rebalance can let their pending launches finish first.
live_arrays: "weakref.WeakSet[DArray]" = weakref.WeakSet()


class DArray:
    """A distributed array in global device memory.

    Block k (C order over the chunk grid) is chunk k of ``alloc``, stored contiguously
    in C order on its home worker. ``x.vaddr`` is the array's first global address.
    """

    def __init__(self, alloc: Allocation, shape, dtype, chunks):
        self.alloc = alloc
        # Futures of the launches that last wrote this array and of later launches that
        # read it: the next launch orders itself after them (see dgvm.kernels.launch).
        self._writes: list = []
        self._reads: list = []
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.chunks = tuple(tuple(int(b) for b in axis) for axis in chunks)
        live_arrays.add(self)

    # -- metadata ------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def numblocks(self) -> tuple[int, ...]:
        return chunk_grid.grid_shape(self.chunks)

    @property
    def vaddr(self) -> int:
        return self.alloc.vaddr

    @property
    def alloc_id(self) -> int:
        return self.alloc.alloc_id

    def locations(self) -> dict[tuple[int, ...], str]:
        """Block index -> address of the worker that holds it."""
        grid = self.numblocks
        self.alloc._fresh()
        return {
            chunk_grid.block_index(k, grid): self.alloc.home(k) for k in range(self.alloc.nchunks)
        }

    def chunk_info(self):
        """The ``ChunkInfo`` rows of the allocation behind the array."""
        return self.alloc.chunks

    # -- where the blocks live ------------------------------------------------------------
    def _chunk_indices(self, blocks) -> list[int]:
        """Chunk indices of ``blocks``: an int (chunk index), a block tuple, or a list."""
        grid = self.numblocks
        items = blocks if isinstance(blocks, list) else [blocks]
        out = []
        for b in items:
            if isinstance(b, tuple):
                if len(b) != len(grid) or not all(0 <= v < n for v, n in zip(b, grid)):
                    raise IndexError(f"block {b} is outside the block grid {grid}")
                b = int(np.ravel_multi_index(b, grid))
            out.append(int(b))  # the GVAT checks chunk indices
        return out

    def migrate(self, blocks, worker: str) -> list[int]:
        """Move the home of ``blocks`` (a chunk index, a block tuple, or a list of them) to
        ``worker``, after the launches that use this array; returns the chunks moved."""
        self.settle()
        return self.alloc.migrate(self._chunk_indices(blocks), worker)

    # -- life cycle ----------------------------------------------------------------------
    def settle(self) -> None:
        """Let every pending launch that writes or reads this array finish."""
        from distributed import wait as dask_wait

        pending = self._writes + self._reads
        if pending:
            dask_wait(pending)

    def wait(self) -> "DArray":
        """Block until every launch writing this array has finished."""
        from dgvm.kernels.launch import settle

        settle(self._writes)
        return self

    def free(self) -> None:
        # Launches that use the memory finish first (their errors belong to wait).
        self.settle()
        self._writes, self._reads = [], []
        self.alloc.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.alloc.freed:
            self.free()

    def __repr__(self):
        return (
            f"dgvm.DArray<shape={self.shape}, dtype={self.dtype}, numblocks={self.numblocks}, "
            f"vaddr={self.vaddr:#x}>"
        )

    # -- host round trip -----------------------------------------------------------------
    def write_blocks(self, source: np.ndarray) -> None:
        """Copy a host array of this shape into the blocks, one request per worker."""
        from dgvm.kernels.launch import settle

        settle(self._writes + self._reads)
        pieces = []
        for k, sl in enumerate(chunk_grid.block_slices(self.chunks)):
            block = np.ascontiguousarray(source[sl], dtype=self.dtype)
            pieces.append((k, 0, block.reshape(-1).view(np.uint8)))
        self.alloc.put(pieces)

    def __array__(self, dtype=None, copy=None):
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype)

    def to_numpy(self) -> np.ndarray:
        self.wait()
        out = np.empty(self.shape, dtype=self.dtype)
        slices = chunk_grid.block_slices(self.chunks)
        sizes = np.diff(self.alloc.offsets)
        blocks = self.alloc.get([(k, 0, int(n)) for k, n in enumerate(sizes)])
        for sl, raw in zip(slices, blocks):
            shape = tuple(s.stop - s.start for s in sl)
            out[sl] = raw.view(self.dtype).reshape(shape)
        return out
