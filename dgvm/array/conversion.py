"""To and from the host and dask: ``from_numpy``, ``asnumpy``, ``from_dask``, ``to_dask``.

Writes go one request per worker from the caller; reads gather into one NumPy array on
the caller (on purpose: nothing else in ``dgvm.array`` gathers). A dask array's blocks
are computed one by one and written to the chunks; ``to_dask`` makes a dask array whose
blocks are read from the chunks on the workers that hold them.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from dask.highlevelgraph import HighLevelGraph

from dgvm.array._engine.blockwise_tasks import block_from_store
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.array_object import DArray
from dgvm.protocol.records import ArraySpec

__all__ = ["asnumpy", "from_dask", "from_numpy", "to_dask"]


@empty_aware
def from_numpy(a, chunks="auto", placement=None, colocate=None, client=None, replicas=None) -> DArray:
    """Copy a NumPy array into global device memory, cut into ``chunks`` (``replicas=k``:
    each chunk kept on k workers)."""
    return DArray.from_host(a, chunks, placement, colocate, client, replicas=replicas)


@empty_aware
def from_dask(d, chunks=None) -> DArray:
    """A DArray from a dask array; its blocks are computed one by one and written to the
    chunks (keep ``chunks=None`` to use the dask array's own)."""
    x = DArray.allocated(d.shape, d.dtype, chunks or d.chunks)
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
    x.made_from_host()  # computed by dask, written from here: nothing makes it again
    return x


def to_dask(x: DArray):
    """A dask array whose blocks are read from ``x``'s chunks on the workers that hold
    them (NumPy blocks on ``cpu``, CuPy blocks on ``cuda``)."""
    if x.size == 0:  # no chunk to read (zero_size)
        return da.from_array(np.empty(x.shape, dtype=x.dtype))
    x.wait()
    spec = ArraySpec.of(x)
    name = f"dgvm-to-dask-{x.alloc_id}-{id(x):x}"
    layer = {}
    for k, block in enumerate(np.ndindex(*x.numblocks)):
        layer[(name, *block)] = (block_from_store, spec, k)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=())
    return da.Array(graph, name, x.chunks, dtype=x.dtype, meta=np.empty((0,) * x.ndim, x.dtype))


def asnumpy(x) -> np.ndarray:
    """Gather a DArray into a new NumPy array on the caller (anything else: as
    ``numpy.asarray`` gives it, as ``cupy.asnumpy`` does)."""
    return x.to_numpy() if isinstance(x, DArray) else np.asarray(x)
