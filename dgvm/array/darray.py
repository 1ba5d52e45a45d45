"""``DArray``: an n-d array whose blocks are the chunks of one GVAT allocation."""

from __future__ import annotations

import math

import numpy as np

from dgvm.protocol import chunk_grid
from dgvm.client import progress
from dgvm.client.allocation import Allocation
from dgvm.array._engine.deferred import host_value
from dgvm.array._engine.lifecycle import release_when_unreachable
from dgvm.client.dispatch import settle
from dgvm.client.pending import Pending
from dgvm.array.operators import ArrayMethods, ArrayOperators


class DArray(ArrayOperators, ArrayMethods):
    """A distributed array in global device memory.

    Block k (C order over the chunk grid) is chunk k of ``alloc``, stored contiguously
    in C order on its home worker. ``x.vaddr`` is the array's first global address.
    Its memory is freed with ``free()``, at the end of a ``with`` block, or when the
    last reference to it goes away (after the operations that use it).

    An elementwise result starts *deferred* (``dgvm.array._engine.deferred``): it has a shape,
    dtype and chunks but no allocation until something needs its values; touching
    ``alloc`` materializes it.
    """

    def __init__(self, alloc: Allocation | None, shape, dtype, chunks):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.chunks = tuple(tuple(int(b) for b in axis) for axis in chunks)
        self._deferred = None
        # Deferred arrays that read this one: a write materializes them first.
        self._readers: dict = {}
        self._alloc = None
        if alloc is not None:
            self._adopt(alloc)

    def _adopt(self, alloc: Allocation) -> None:
        self._alloc = alloc
        # Futures of the launches that last wrote this array and of later launches that
        # read it: the next launch orders itself after them (see dgvm.client.dispatch).
        release_when_unreachable(self, alloc)

    @property
    def alloc(self) -> Allocation:
        """The GVAT allocation behind the array (made now if the array is deferred)."""
        if self._alloc is None:
            self._materialize_if_deferred()
            if self._alloc is None:
                from dgvm.protocol.errors import DgvmError

                raise DgvmError(f"this {self.shape} {self.dtype} DArray was freed before it was computed")
        return self._alloc

    @property
    def client(self):
        """The Dask client of the array's cluster (known without computing a deferred array)."""
        d = self._deferred
        if self._alloc is None and d is not None:
            return d.client or d.inputs[0].client  # a host value has no inputs
        return self.alloc.client

    @property
    def pending(self) -> Pending:
        """The tasks that write this array and those that read it since (made now if
        the array is deferred)."""
        return self.alloc.pending

    def _materialize_if_deferred(self) -> None:
        if self._deferred is not None:
            from dgvm.array.elementwise import materialize

            materialize(self)

    def before_write(self) -> None:
        """Deferred results made from this array's present values are computed first."""
        from dgvm.array._engine.deferred import materialize_readers

        if self._readers:
            materialize_readers(self)

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
        if self.size == 0:
            return {}  # held on the caller (dgvm.array._engine.zero_size)
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
                b = chunk_grid.flat_index(b, grid)
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

        if host_value(self) is not None:
            return  # held on the caller: nothing runs on it
        pending = self.pending.all()
        if pending:
            dask_wait(pending)

    def persist(self) -> "DArray":
        """Start computing the array now and return at once (``wait`` also waits).

        A deferred elementwise result runs when its values are first needed. A loop that
        makes several results before it looks at any calls ``persist()`` on each, so their
        tasks queue on the workers back to back instead of each waiting for a round trip."""
        if host_value(self) is None:
            self.alloc  # a deferred result is materialized: its tasks are submitted, not awaited
        return self

    def wait(self) -> "DArray":
        """Block until every launch writing this array has finished."""
        if host_value(self) is not None:
            return self  # its values are on the caller already, or it has none
        settle(self.pending.writes)
        return self

    def free(self) -> None:
        """Give the array's device memory back now (also done when it becomes unreachable)."""
        from dgvm.array._engine.deferred import undefer

        if self._alloc is None:  # deferred: nothing computed, nothing to give back
            undefer(self)
            return
        self.before_write()
        # Launches that use the memory finish first (their errors belong to wait).
        self.settle()
        self.pending.take()
        self.alloc.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._alloc is None or not self._alloc.freed:
            self.free()

    def __repr__(self):
        if self._alloc is None:
            return (f"dgvm.DArray<shape={self.shape}, dtype={self.dtype}, "
                    f"numblocks={self.numblocks}, deferred>")
        return (
            f"dgvm.DArray<shape={self.shape}, dtype={self.dtype}, numblocks={self.numblocks}, "
            f"vaddr={self.vaddr:#x}>"
        )

    # -- host round trip -----------------------------------------------------------------
    def write_blocks(self, source: np.ndarray) -> None:
        """Copy a host array of this shape into the blocks, one request per worker."""
        from distributed import wait as dask_wait

        self.before_write()
        settle(self.pending.writes)
        dask_wait(self.pending.readers())  # their errors are theirs
        pieces = []
        for k, sl in enumerate(chunk_grid.block_slices(self.chunks)):
            block = np.ascontiguousarray(source[sl], dtype=self.dtype)
            pieces.append((k, 0, block.reshape(-1).view(np.uint8)))
        for batch in progress.batches(pieces, "write", self.nbytes):  # a bar on a terminal
            self.alloc.put(batch)

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a DArray lives in device memory: np.asarray(x) always copies")
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype)

    # -- Python protocols ------------------------------------------------------------------
    def __getitem__(self, key):
        from dgvm.array.indexing import getitem

        return getitem(self, key)

    def __setitem__(self, key, value):
        from dgvm.array.indexing import setitem

        setitem(self, key, value)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DArray")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d DArray")
        for i in range(self.shape[0]):
            yield self[i]

    def item(self):
        """The value of a one-element array as a Python scalar."""
        if self.size != 1:
            raise ValueError(f"item() needs an array of one element; this one has shape {self.shape}")
        return self.to_numpy().reshape(-1)[0].item()

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer DArrays can be used as an index, not {self.dtype}")
        return int(self._scalar("index"))

    def _scalar(self, what: str):
        if self.size != 1:
            raise TypeError(f"{what}() of a DArray needs one element; this one has shape {self.shape}")
        return self.item()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from dgvm.array.interop import array_ufunc

        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from dgvm.array.interop import array_function

        return array_function(func, types, args, kwargs)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from dgvm.array.interop import dlpack

        return dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        from dgvm.array.interop import dlpack_device

        return dlpack_device(self)

    def to_numpy(self) -> np.ndarray:
        if host_value(self) is not None:
            return host_value(self).copy()
        from dgvm.array._engine.small_reads import read_view

        small = read_view(self)  # x[i, j]: read in place, nothing computed
        if small is not None:
            return small
        self.wait()
        out = np.empty(self.shape, dtype=self.dtype)
        slices = chunk_grid.block_slices(self.chunks)
        sizes = np.diff(self.alloc.offsets)
        wanted = list(zip(slices, [(k, 0, int(n)) for k, n in enumerate(sizes)]))
        for batch in progress.batches(wanted, "read", self.nbytes):  # a bar on a terminal
            for (sl, _), raw in zip(batch, self.alloc.get([piece for _, piece in batch])):
                shape = tuple(s.stop - s.start for s in sl)
                out[sl] = raw.view(self.dtype).reshape(shape)
        return out
