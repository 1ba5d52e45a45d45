"""``x[key] = value`` where one axis is indexed by a DArray of integers, on the workers.

The indices never come to the caller and never ride in a task graph. Where they live,
each chunk of them is counted per run of at most x's largest block along the axis and
per block of x there, with the smallest and largest index (``index_ops.Histogram``, as
for gathers): the caller checks the bounds from those two numbers, so that an index
out of bounds raises NumPy's IndexError before anything is written. Then each chunk of
x that some index falls in reads the runs with indices in its block (and the value's
elements they select) where its task runs, and writes them in place
(``assign_ops.IndexAssign``); of repeated indices the last one wins.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import read_while_written
from dgvm.array._engine.assign_ops import IndexAssign
from dgvm.array._engine.index_gather import check_indices, counted
from dgvm.array._engine.keys import chunks_selected

MAX_HITS = 1 << 16  # (runs, blocks) pairs of an assignment: 8 kB of bits at most

def assign_indexed(x, maps, axis: int, keep, sel_shape, value, value_shape) -> None:
    """``x[key] = value`` for ``keys.plan``'s ``maps``, whose map of ``axis`` is a 1-d
    DArray of integers; ``value`` a scalar (``value_shape`` None) or a DArray that
    broadcasts to the selection (``sel_shape``, checked), read as input 1."""
    idx = maps[axis]
    check_indices(idx, "integer array indices")
    idx = read_while_written(idx, x).stored()
    n = x.shape[axis]
    edges = np.concatenate([[0], np.cumsum(x.chunks[axis])]).astype(np.int64)
    # Runs of at least x's largest block along the axis, and few enough that their hits
    # per block (one bit each, in every task) stay small however many indices there are.
    nb = len(x.chunks[axis])
    cut = max(max(x.chunks[axis]), -(-int(idx.shape[0]) * nb // MAX_HITS))
    runs, counts, idx = counted(idx, axis, n, edges, cut)  # IndexError: nothing written yet
    hits = counts > 0
    blocks = np.flatnonzero(hits.any(axis=0))
    if not len(blocks):
        return
    where = list(maps)
    where[axis] = edges[blocks]  # a coordinate in each block some index falls in
    chunks = chunks_selected(x, where)
    own = list(maps)
    own[axis] = None
    scalar = value_shape is None
    op = IndexAssign(tuple(own), sel_shape, keep, value if scalar else None, value_shape,
                     axis=axis, n=n, edges=edges, index_chunks=idx.chunks[0], cut=cut,
                     hits=np.packbits(hits.reshape(-1)), index_input=1 if scalar else 2)
    blockwise.run(op, x, [x, idx] if scalar else [x, value, idx], "setitem-index", chunks)
