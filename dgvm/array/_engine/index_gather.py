"""Integer-array gathers along one axis (``x[idx]``, ``take``), where the chunks live.

The indices never come to the caller and never ride in a task graph: a DArray of
indices stays where it is; a host array is stored once, beside the output chunks that
read it. The output is cut along the axis into runs of at most the input's largest
block there (``index_ops.runs_of``); then, on the workers:

1. per run and input block along the axis, how many of the run's indices fall in the
   block: counted where a DArray of indices lives (``Histogram``: small, to the caller,
   with the range of the indices for the bounds check), by the caller for its own array;
2. each output chunk is placed beside the input block that gives its run most rows;
   every other input chunk's worker copies the rows it gives the run, in the run's
   order, into a temporary ``pieces`` array beside it (``Pick``);
3. each output chunk reads the rows of its own input block in place and the pieces of
   the others (``Place``): only the selected rows travel between workers.
"""

from __future__ import annotations

import itertools

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.index_ops import Histogram, Pick, Place, Plan, runs_of
from dgvm.protocol import chunk_grid


def check_indices(idx, what: str) -> None:
    """1-d integer indices (a DArray or a host array), or NumPy's IndexError."""
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise IndexError(f"{what} must be 1-d integer arrays, got {idx.dtype} {tuple(idx.shape)}")


def _out_of_bounds(smallest: int, largest: int, axis: int, n: int) -> None:
    if smallest < -n or largest >= n:
        bad = largest if largest >= n else smallest
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")


def _host_counts(v: np.ndarray, edges: np.ndarray, runs: list[int]) -> np.ndarray:
    nb = len(edges) - 1
    run = np.repeat(np.arange(len(runs)), runs)
    block = np.searchsorted(edges[1:-1], v, side="right")
    return np.bincount(run * nb + block, minlength=len(runs) * nb).reshape(len(runs), nb)


def _picks(x, grid, axis: int, block_along) -> list[int]:
    """Per block of a result's ``grid`` (C order): the chunk of ``x`` with the same block
    off ``axis`` and block ``block_along(i)`` along it, for the result's block i there."""
    out = []
    for block in itertools.product(*(range(g) for g in grid)):
        src = list(block)
        src[axis] = int(block_along(block[axis]))
        out.append(chunk_grid.flat_index(src, x.numblocks))
    return out


def counted(indices, axis: int, n: int, edges: np.ndarray, cut: int):
    """(runs, counts per run and input block, the indices): a DArray's counted where it
    lives and left there; a host array's checked, made non-negative and counted here."""
    if isinstance(indices, ArrayCore):
        runs = [r for c in indices.chunks[0] for r in runs_of(c, cut)]
        parts = blockwise.collect(Histogram(n, edges, cut), indices, "take-count")
        blocks = [parts[(j,)] for j in range(indices.numblocks[0])]
        _out_of_bounds(min(int(b[1][0]) for b in blocks), max(int(b[1][1]) for b in blocks), axis, n)
        return runs, np.concatenate([b[0] for b in blocks]), indices
    v = np.asarray(indices)
    if not len(v):
        return [], np.zeros((0, len(edges) - 1), dtype=np.int64), v
    _out_of_bounds(int(v.min()), int(v.max()), axis, n)
    v = v.astype(np.int64)
    if indices.dtype.kind == "i":
        v = np.where(v < 0, v + n, v)
    runs = runs_of(len(v), cut)
    return runs, _host_counts(v, edges, runs), v


def gather_along(x, axis: int, indices, name: str = "take"):
    """``x`` at the integer ``indices`` along ``axis`` (a 1-d DArray or host array;
    negative ones count from the end), as ``numpy.take(x, indices, axis)``."""
    n = x.shape[axis]
    edges = np.concatenate([[0], np.cumsum(x.chunks[axis])]).astype(np.int64)
    if isinstance(indices, ArrayCore) and indices.host_value is not None:
        indices = indices.host_value  # its values are on the caller already
    check_indices(indices, "integer array indices")
    runs, counts, idx = counted(indices, axis, n, edges, cut=max(1, max(x.chunks[axis], default=1)))
    shape = x.shape[:axis] + (int(indices.shape[0]),) + x.shape[axis + 1:]
    if 0 in shape:  # nothing to gather: held on the caller (zero_size)
        return type(x).empty_on_caller(shape, x.dtype, x.client)
    counts = counts.astype(np.int32 if counts.max() < 2**31 else np.int64)  # half the bytes in the tasks
    plan = Plan(axis, n, edges, np.concatenate([[0], np.cumsum(runs)]).astype(np.int64), counts)
    if not isinstance(idx, ArrayCore):  # stored once, beside the output chunks that read it
        first = [0] * x.ndim
        homes = [chunk_grid.flat_index(first[:axis] + [int(b)] + first[axis + 1:], x.numblocks) for b in plan.best]
        idx = type(x).from_host(idx, chunks=(tuple(runs),), colocate=(x, homes), client=x.client)
    inputs = [x, idx]
    if len(plan.pairs):
        sizes = tuple(int(c) for c in np.diff(plan.starts))
        pchunks = x.chunks[:axis] + (sizes,) + x.chunks[axis + 1:]
        pshape = x.shape[:axis] + (int(plan.starts[-1]),) + x.shape[axis + 1:]
        grid = chunk_grid.grid_shape(pchunks)
        pieces = type(x).allocated(pshape, x.dtype, pchunks, client=x.client, zero=False,
                                   colocate=(x, _picks(x, grid, axis, lambda k: plan.pairs[k][1])))
        blockwise.run(Pick(plan), pieces, [x, idx], f"{name}-pick")
        inputs.append(pieces)
    chunks = x.chunks[:axis] + (tuple(runs),) + x.chunks[axis + 1:]
    grid = chunk_grid.grid_shape(chunks)
    out = type(x).allocated(shape, x.dtype, chunks, client=x.client, zero=False,
                            colocate=(x, _picks(x, grid, axis, lambda r: plan.best[r])))
    blockwise.run(Place(plan), out, inputs, name)
    return out
