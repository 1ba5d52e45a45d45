"""Creating DArrays, and moving them to and from NumPy and dask.array.

Every array is made where it lives: a fill, a range or an identity matrix is computed on
the workers that hold its chunks (one task per worker), never sent from the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dgvm.protocol import chunk_grid
from dgvm.client.allocation import Allocation
from dgvm.array._engine import blockwise, recycle
from dgvm.array.darray import DArray
from dgvm.array._engine.zero_size import NoElements
from dgvm.client.buffer import placement_request
from dgvm.protocol.errors import OutOfDeviceMemory


def _client(client=None):
    """The given client, the default one, or a new local cluster's (``dgvm.connect()``),
    so that ``import dgvm.array as np`` is all a NumPy program needs."""
    if client is not None:
        return client
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        from dgvm import config
        from dgvm.backends.cuda import gpu_count
        from dgvm.client.session import connect

        import atexit

        backend = config.get("backend")
        # In-process cpu workers: a script with no ``if __name__ == "__main__":`` guard
        # would otherwise be run again by every spawned worker process. GPU workers are
        # processes, and the scheduler gets one of its own: a program's operations then
        # do not wait on the scheduler's work for the interpreter lock
        # (``LocalCluster(scheduler_process=True)``). None of these processes, at start
        # or when a nanny restarts its worker, runs the program again (``dgvm.deploy.spawn_guard``).
        local = backend == "cpu" or (backend == "auto" and gpu_count() == 0)
        if local:
            client = connect(processes=False)
        else:
            from dgvm.deploy.spawn_guard import ProgramNotRerunNanny, program_not_rerun

            with program_not_rerun():
                client = connect(scheduler_process=True, worker_class=ProgramNotRerunNanny)
        atexit.register(_close_quietly, client)
        return client


def _close_quietly(client) -> None:
    """At exit, the implicit cluster goes away with its memory: close it before Dask's
    own exit handlers, so no worker is asked to free chunks while it shuts down."""
    cluster = client.cluster
    client.close()
    if cluster is not None:
        cluster.close()


def _shape(shape) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(int(s) < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return tuple(int(s) for s in shape)  # a zero in it: see allocate


def _dtype(dtype, default=np.float64) -> np.dtype:
    from dgvm.array.dtypes import check

    return check(default if dtype is None else dtype)


def empty(shape, dtype=None, chunks="auto", placement=None, colocate=None, client=None,
          *, device=None) -> DArray:
    """A new array in global device memory (its memory is zero-filled on allocation)."""
    return new_array(shape, dtype, chunks, placement, colocate, client)


def new_array(shape, dtype, chunks, placement=None, colocate=None, client=None, zero=True) -> DArray:
    """``empty``'s array; ``zero=False`` for an operation's result that its task writes
    whole (not zero-filled; ``allocate``)."""
    shape = _shape(shape)
    dtype = _dtype(dtype)
    grid = chunk_grid.normalize(chunks, shape, dtype)
    return DArray(allocate(shape, dtype, grid, placement, colocate, client, zero), shape, dtype, grid)


def allocate(shape, dtype, grid, placement=None, colocate=None, client=None, zero=True) -> Allocation:
    """The GVAT allocation for an array of this shape, dtype and chunk grid (zero-filled
    unless ``zero=False``: for results whose every element the next task writes)."""
    client = _client(client)
    if math.prod(shape) == 0:  # nothing to place: the caller holds it (dgvm.array._engine.zero_size)
        raise NoElements(shape, dtype, client)
    # An operation's result (written whole by its task, placed by its inputs) may take
    # over a released one's allocation, and be reused once released; not host data.
    reusable = not zero and colocate is not None
    kept = recycle.take(client, shape, np.dtype(dtype), grid, colocate) if reusable else None
    if kept is not None:  # ordered after the tasks still running on it
        alloc, after = kept
        alloc.pending.wrote(after)
        return alloc

    def create():
        return Allocation.create(
            client, shape=list(shape), dtype=np.dtype(dtype).str, chunks=[list(c) for c in grid],
            zero=bool(zero), **placement_request(placement, colocate),
        )

    try:
        alloc = create()
    except OutOfDeviceMemory:
        if not recycle.flush(client):
            raise
        from dgvm.array._engine.lifecycle import settle_releases

        settle_releases()  # the kept allocations are freed: room, perhaps
        alloc = create()
    alloc.reusable = reusable
    return alloc


def zeros(shape, dtype=None, chunks="auto", placement=None, colocate=None, client=None,
          *, device=None) -> DArray:
    """An array of zeros in global device memory."""
    return empty(shape, dtype, chunks, placement, colocate, client)


@dataclass
class _Fill:
    value: object
    dtype: object

    def block(self, read, lo, hi, xp):
        return xp.full([h - l for l, h in zip(lo, hi)], self.value, dtype=self.dtype)


def full(shape, fill_value, dtype=None, chunks="auto", placement=None, colocate=None,
         client=None, *, device=None) -> DArray:
    """An array of ``fill_value`` (dtype from the value when not given)."""
    if isinstance(fill_value, DArray):
        if fill_value.ndim:  # an array fill: broadcast over the shape, as NumPy's
            x = empty(shape, dtype or fill_value.dtype, chunks, placement, colocate, client)
            x[...] = fill_value
            return x
        dtype = dtype or fill_value.dtype
        fill_value = fill_value.item()
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
        if dtype.kind == "i":
            dtype = np.dtype(np.int64)
    x = empty(shape, dtype, chunks, placement, colocate, client)
    if fill_value != 0:
        blockwise.run(_Fill(fill_value, x.dtype), x, [], "full")
    return x


def ones(shape, dtype=None, chunks="auto", placement=None, colocate=None, client=None,
         *, device=None) -> DArray:
    """An array of ones."""
    return full(shape, 1, _dtype(dtype), chunks, placement, colocate, client)


def empty_like(x, /, *, dtype=None, device=None, chunks=None) -> DArray:
    return empty(x.shape, dtype or x.dtype, chunks or x.chunks, colocate=x if chunks is None else None)


def zeros_like(x, /, *, dtype=None, device=None, chunks=None) -> DArray:
    return empty_like(x, dtype=dtype, chunks=chunks)


def ones_like(x, /, *, dtype=None, device=None, chunks=None) -> DArray:
    return full_like(x, 1, dtype=dtype, chunks=chunks)


def full_like(x, /, fill_value, *, dtype=None, device=None, chunks=None) -> DArray:
    return full(x.shape, fill_value, dtype or x.dtype, chunks or x.chunks,
                colocate=x if chunks is None else None)


@dataclass
class _Range:
    """``start + i * step`` for global indices i (arange, linspace)."""

    start: float
    step: float
    dtype: object
    last: object = None  # linspace with endpoint: the exact final value at index n-1
    n: int = 0

    def block(self, read, lo, hi, xp):
        i = xp.arange(lo[0], hi[0], dtype=np.float64 if np.dtype(self.dtype).kind in "fc" else np.int64)
        out = (i * self.step + self.start).astype(self.dtype)
        if self.last is not None and hi[0] == self.n:
            out[-1] = self.last
        return out


def arange(start, /, stop=None, step=1, *, dtype=None, device=None, chunks="auto") -> DArray:
    """Evenly spaced values in ``[start, stop)``."""
    if stop is None:
        start, stop = 0, start
    n = max(0, math.ceil((stop - start) / step))
    if dtype is None:
        # NumPy's dtype for these three values (a float stop makes floats), from a range
        # of two elements: ``stop - stop`` carries stop's type.
        dtype = np.arange(start, start + 2 * step + (stop - stop), step).dtype
    x = empty((n,), dtype, chunks)
    blockwise.run(_Range(start, step, x.dtype), x, [], "arange")
    return x


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True, chunks="auto") -> DArray:
    """``num`` evenly spaced values from ``start`` to ``stop``."""
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    if dtype is None:
        dtype = np.result_type(np.float64, np.asarray(start), np.asarray(stop))
    x = empty((num,), dtype, chunks)
    last = stop if endpoint and num > 1 else None
    blockwise.run(_Range(start, step, x.dtype, last, num), x, [], "linspace")
    return x


def _diagonals(lo, hi, xp):
    """For a block of the last two axes: column index minus row index of every element."""
    return xp.arange(lo[-1], hi[-1])[None, :] - xp.arange(lo[-2], hi[-2])[:, None]


@dataclass
class _Eye:
    k: int
    dtype: object

    def block(self, read, lo, hi, xp):
        return (_diagonals(lo, hi, xp) == self.k).astype(self.dtype)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None, chunks="auto") -> DArray:
    """A 2-d array with ones on diagonal ``k``."""
    x = empty((n_rows, n_rows if n_cols is None else n_cols), dtype, chunks)
    blockwise.run(_Eye(k, x.dtype), x, [], "eye")
    return x


@dataclass
class _Triangle:
    k: int
    upper: bool

    def block(self, read, lo, hi, xp):
        x = read(0, lo, hi)
        d = _diagonals(lo, hi, xp)
        keep = (d >= self.k) if self.upper else (d <= self.k)
        return xp.where(keep, x, xp.zeros((), dtype=x.dtype))


def _triangle(x, k, upper, name):
    if x.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions, got {x.ndim}")
    out = empty_like(x)
    blockwise.run(_Triangle(k, upper), out, [x], name)
    return out


def tril(x, /, *, k=0) -> DArray:
    """``x`` with the elements above diagonal ``k`` zeroed."""
    return _triangle(x, k, False, "tril")


def triu(x, /, *, k=0) -> DArray:
    """``x`` with the elements below diagonal ``k`` zeroed."""
    return _triangle(x, k, True, "triu")


@dataclass
class _Grid:
    """One output of meshgrid: a 1-d input spread along output axis ``axis``."""

    axis: int

    def block(self, read, lo, hi, xp):
        v = read(0, [lo[self.axis]], [hi[self.axis]])
        shape = [1] * len(lo)
        shape[self.axis] = hi[self.axis] - lo[self.axis]
        return xp.broadcast_to(v.reshape(shape), [h - l for l, h in zip(lo, hi)])


def meshgrid(*arrays, indexing="xy") -> list[DArray]:
    """Coordinate arrays from 1-d arrays (``indexing`` "xy" or "ij", as NumPy)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"indexing must be 'xy' or 'ij', got {indexing!r}")
    shape = [a.shape[0] for a in arrays]
    axes = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    chunks = [None] * len(arrays)
    for a, ax in zip(arrays, axes):
        chunks[ax] = a.chunks[0]
    dtype = np.result_type(*(a.dtype for a in arrays))
    out = []
    for a, ax in zip(arrays, axes):
        g = empty(tuple(shape), dtype, tuple(chunks))
        blockwise.run(_Grid(ax), g, [a.astype(dtype) if a.dtype != dtype else a], "meshgrid")
        out.append(g)
    return out


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


def from_dlpack(x, /, *, device=None, copy=None) -> DArray:
    """A DArray of the values of ``x``, any object that exports DLPack (a NumPy or CuPy
    array, a tensor), copied into global device memory; a DArray as ``asarray``."""
    if isinstance(x, DArray):
        return asarray(x, copy=copy)
    if copy is False:
        raise ValueError("dgvm.array.from_dlpack: copy=False, but the values must be copied "
                         "into global device memory")
    if hasattr(x, "get") and hasattr(x, "__cuda_array_interface__"):
        host = x.get()  # a CuPy array: its own copy to the host
    else:
        try:
            host = np.from_dlpack(x)
        except (TypeError, BufferError, RuntimeError) as e:
            raise TypeError(f"dgvm.array.from_dlpack: {type(x).__name__} gives no host "
                            f"memory through DLPack ({e})") from None
    return from_numpy(host)


def asarray(obj, /, *, dtype=None, device=None, copy=None, chunks="auto") -> DArray:
    """A DArray from a DArray (no copy unless asked or the dtype changes), a NumPy array,
    a dask array, a nested sequence or a scalar."""
    if isinstance(obj, DArray):
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            if copy is False:
                raise ValueError(f"asarray(copy=False) cannot change dtype {obj.dtype} to {dtype}")
            return obj.astype(dtype)
        return obj.astype(obj.dtype) if copy else obj
    if copy is False:
        raise ValueError("asarray(copy=False): host data always moves to device memory")
    if type(obj).__module__.startswith("dask.array"):
        x = from_dask(obj, chunks=None if chunks == "auto" else chunks)
        return x if dtype is None else x.astype(dtype)
    a = np.asarray(obj, dtype=dtype)
    if dtype is None and a.dtype.kind == "i" and not isinstance(obj, (np.ndarray, np.generic)):
        a = a.astype(np.int64)
    return from_numpy(a, chunks)


def from_dask(d, chunks=None) -> DArray:
    """A DArray from a dask array; its blocks are computed one by one and written to the
    chunks (keep ``chunks=None`` to use the dask array's own)."""
    x = empty(d.shape, d.dtype, chunks or d.chunks)
    try:
        d = d.rechunk(x.chunks)
        client = x.alloc.client
        pieces = []
        for k, block in enumerate(np.ndindex(*d.numblocks)):
            value = client.compute(d.blocks[block]).result()
            pieces.append((k, 0, np.ascontiguousarray(value, dtype=x.dtype).reshape(-1).view(np.uint8)))
            if len(pieces) >= 8:
                x.alloc.put(pieces)
                pieces = []
        if pieces:
            x.alloc.put(pieces)
    except BaseException:
        x.free()
        raise
    return x


def _block_from_store(spec, k: int):
    """A task: chunk ``k`` of an array as a new array of the worker's kind."""
    from dgvm.worker.access import Access

    access = Access.here()
    with access.output_chunk():
        return access.chunk(spec, k).copy()


def to_dask(x: DArray):
    """A dask array whose blocks are read from ``x``'s chunks on the workers that hold
    them (NumPy blocks on ``cpu``, CuPy blocks on ``cuda``)."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    from dgvm.worker.access import ArraySpec

    if x.size == 0:  # no chunk to read (dgvm.array._engine.zero_size)
        return da.from_array(np.empty(x.shape, dtype=x.dtype))
    x.wait()
    spec = ArraySpec.of(x)
    name = f"dgvm-to-dask-{x.alloc_id}-{id(x):x}"
    layer = {}
    for k, block in enumerate(np.ndindex(*x.numblocks)):
        layer[(name, *block)] = (_block_from_store, spec, k)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=())
    return da.Array(graph, name, x.chunks, dtype=x.dtype, meta=np.empty((0,) * x.ndim, x.dtype))


def asnumpy(x) -> np.ndarray:
    """Gather a DArray into a new NumPy array on the caller (anything else: as
    ``numpy.asarray`` gives it, as ``cupy.asnumpy`` does)."""
    return x.to_numpy() if isinstance(x, DArray) else np.asarray(x)
