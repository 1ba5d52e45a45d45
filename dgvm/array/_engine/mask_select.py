"""``x[mask]`` for a boolean mask of x's shape, where the chunks live.

The selected positions never come to the caller and never ride in a task graph; the
caller learns one count per chunk. On the workers:

1. how many elements each chunk of the mask selects (``Total`` of the per-line counts
   ``LineCounts``, or a count of the chunk where x's chunks hold whole rows);
2. each chunk of x compacts its selected elements, in C order, into its own piece of a
   temporary 1-d array beside it (``Compact``);
3. where x's chunks hold whole rows (every axis but the first in one block), the
   pieces, in chunk order, are the result's elements in C order: they are the result.
   Otherwise the result is cut into runs within the rows of one row block (the blocks
   along axis 0), each run placed beside a chunk of its row block, and made from the
   pieces of that row block's chunks, laid out line by line by the per-line counts
   (``Interleave``): only selected elements travel between workers.

A host mask is stored once, beside x's chunks; a DArray mask of other chunks is cut
into x's. A 1-d mask along one axis of x stands for the positions of its true elements
(``positions``, made where the mask lives), which ``getitem`` gathers.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.layout_ops import Copy, Reshape
from dgvm.array._engine.mask_ops import Compact, Interleave, LineCounts, Positions, Total
from dgvm.array._engine.placement import result_like
from dgvm.array._engine.search_ops import CountNonzero
from dgvm.array._engine.tree_op import Elementwise
from dgvm.array._engine.views import View
from dgvm.protocol import chunk_grid


def _as_mask_of(x, mask):
    """``mask`` as a stored DArray of x's chunks, its chunks beside x's."""
    if not isinstance(mask, ArrayCore):
        return type(x).from_host(np.asarray(mask), chunks=x.chunks, colocate=x, client=x.client)
    if mask.host_value is not None or mask.chunks != x.chunks:
        out = type(x).allocated(x.shape, np.bool_, x.chunks, colocate=x, client=x.client, zero=False)
        blockwise.run(Copy(), out, [mask], "mask-chunks")
        return out
    return mask.stored()  # computed once, here, if deferred: every pass below reads it


def count_true(mask) -> int:
    """How many elements of ``mask`` (a DArray or host array of booleans) are true,
    counted where its chunks live."""
    if isinstance(mask, ArrayCore) and mask.host_value is not None:
        mask = mask.host_value
    if not isinstance(mask, ArrayCore):
        return int(np.count_nonzero(mask))
    if mask.size == 0:
        return 0
    parts = blockwise.collect(CountNonzero(tuple(range(mask.ndim))), mask, "mask-count")
    return sum(int(np.asarray(c).sum()) for c in parts.values())


def positions(mask, n: int, axis: int):
    """The int64 positions where the 1-d boolean ``mask`` (a DArray or host array) of an
    axis of length ``n`` is true: a host array for a host mask, else a DArray made where
    the mask's chunks live (NumPy's ``mask.nonzero()[0]``, the index array a 1-d mask
    in a key stands for)."""
    if mask.shape != (n,):
        raise IndexError(f"boolean index of shape {tuple(mask.shape)} does not match axis {axis} "
                         f"of the indexed array, of length {n}")
    if not isinstance(mask, ArrayCore) or mask.host_value is not None:
        return np.flatnonzero(mask if not isinstance(mask, ArrayCore) else mask.host_value)
    mask = mask.stored()
    parts = blockwise.collect(CountNonzero((0,)), mask, "mask-count")
    blocks = [b for b in sorted(parts) if int(np.asarray(parts[b]).sum())]
    sizes = [int(np.asarray(parts[b]).sum()) for b in blocks]
    if not sizes:
        return np.zeros(0, dtype=np.int64)
    edges = np.concatenate([[0], np.cumsum(mask.chunks[0])]).astype(np.int64)
    bounds = [([int(edges[b])], [int(edges[b + 1])]) for (b,) in blocks]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    out = type(mask).allocated((int(starts[-1]),), np.int64, (tuple(sizes),), client=mask.client,
                               colocate=(mask, [b for (b,) in blocks]), zero=False)
    blockwise.run(Positions(starts, bounds), out, [mask], "mask-positions")
    return out


def counts(x, mask):
    """(whether x's chunks hold whole rows, true elements of ``mask`` (stored, of x's
    chunks) per block of x, per-line counts or None): step 1 of the module notes."""
    rows_whole = all(nb == 1 for nb in x.numblocks[1:])
    if rows_whole:
        parts = blockwise.collect(CountNonzero(tuple(range(x.ndim))), mask, "mask-count")
        return True, {b: int(np.asarray(c).sum()) for b, c in parts.items()}, None
    lshape = x.shape[:-1] + (x.numblocks[-1],)
    lchunks = x.chunks[:-1] + ((1,) * x.numblocks[-1],)
    lines = type(x).allocated(lshape, np.int64, lchunks, colocate=x, client=x.client, zero=False)
    edges = np.concatenate([[0], np.cumsum(x.chunks[-1])]).astype(np.int64)
    blockwise.run(LineCounts(edges), lines, [mask], "mask-lines")
    totals = {b: int(c) for b, c in blockwise.collect(Total(), lines, "mask-count").items()}
    return False, totals, lines


def row_runs(x, per_row: np.ndarray, firsts: list) -> tuple[list, list]:
    """A 1-d array of ``per_row[r]`` elements per row block r of x, in order, cut into
    runs that each lie within one row block and are no larger than x's largest chunk:
    (the runs' lengths, per run the flat index of the chunk of x it is placed beside,
    taken in turn from ``firsts[r]``, the chunks of its row block to spread over)."""
    cap = int(chunk_grid.block_nbytes(x.chunks, 1).max())
    runs, picks = [], []
    for r, n in enumerate(int(n) for n in per_row):
        if not n:
            continue
        k = -(-n // cap)
        base, extra = divmod(n, k)
        for t in range(k):
            runs.append(base + (t < extra))
            picks.append(chunk_grid.flat_index(firsts[r][t % len(firsts[r])], x.numblocks))
    return runs, picks


def masked(x, mask):
    """``x[mask]``: the elements of ``x`` where ``mask`` (a DArray or host array of
    booleans of x's shape) is true, in C order, as a 1-d array."""
    if tuple(mask.shape) != x.shape:
        raise IndexError(f"boolean index of shape {tuple(mask.shape)} does not match the indexed array's {x.shape}")
    x = x.stored()  # a view is read as its copy (taken once, here)
    mask = _as_mask_of(x, mask)
    rows_whole, totals, lines = counts(x, mask)
    blocks = [b for b in itertools.product(*(range(g) for g in x.numblocks)) if totals.get(b, 0)]
    total = sum(totals[b] for b in blocks)
    if not total:  # held on the caller (zero_size)
        return type(x).empty_on_caller((0,), x.dtype, x.client)
    sizes = [totals[b] for b in blocks]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    edges = [np.concatenate([[0], np.cumsum(c)]).astype(np.int64) for c in x.chunks]
    bounds = [([int(e[i]) for e, i in zip(edges, b)], [int(e[i + 1]) for e, i in zip(edges, b)]) for b in blocks]
    flat = [chunk_grid.flat_index(b, x.numblocks) for b in blocks]
    pieces = type(x).allocated((total,), x.dtype, (tuple(sizes),), colocate=(x, flat), client=x.client, zero=False)
    blockwise.run(Compact(starts, bounds), pieces, [x, mask], "mask")
    if rows_whole:
        return pieces
    return _interleaved(x, lines, pieces, blocks, sizes, starts, edges)


def mask_along(x, mask, axis: int):
    """``mask`` (a DArray or host array of booleans of x's axes ``axis .. axis +
    mask.ndim``) repeated along x's other axes: a stored mask of x's shape and chunks,
    beside x's chunks, made on the workers from the mask's own chunks."""
    if mask.ndim == x.ndim:
        return _as_mask_of(x, mask)
    k = mask.ndim
    if not isinstance(mask, ArrayCore) or mask.host_value is not None:
        value = np.asarray(mask if not isinstance(mask, ArrayCore) else mask.host_value)
        mask = type(x).from_host(value, chunks=x.chunks[axis:axis + k], client=x.client)
    else:
        mask = mask.stored()
    view = View.of_axes(mask, (None,) * axis + tuple(range(k)) + (None,) * (x.ndim - axis - k))
    out = type(x).allocated(x.shape, np.bool_, x.chunks, colocate=x, client=x.client, zero=False)
    blockwise.run(Elementwise(("in", 0), [view.shape], x.shape, [view]), out, [mask], "mask-broadcast")
    return out


def masked_along(x, mask, axis: int):
    """``x[(slice(None),) * axis + (mask,)]`` for a mask of x's axes ``axis .. axis +
    mask.ndim``: of shape ``x.shape[:axis] + (count,) + x.shape[axis + mask.ndim:]``. The
    mask repeated along x's other axes (``mask_along``) selects the same elements in C
    order: its 1-d ``masked`` result, laid out in that shape on the workers."""
    k = mask.ndim
    if x.size == 0:  # held on the caller (zero_size): the count only
        shape = x.shape[:axis] + (count_true(mask),) + x.shape[axis + k:]
        return type(x).empty_on_caller(shape, x.dtype, x.client)
    x = x.stored()
    flat = masked(x, mask_along(x, mask, axis))
    other = math.prod(x.shape[:axis] + x.shape[axis + k:])
    shape = x.shape[:axis] + (flat.size // other,) + x.shape[axis + k:]
    if shape == flat.shape:
        return flat
    if flat.size == 0:
        return type(x).empty_on_caller(shape, x.dtype, x.client)
    # Rows of whole trailing axes, cut to about x's chunk size (``manipulation.reshape``'s).
    row = math.prod(shape[1:]) * x.dtype.itemsize
    per = max(1, int(chunk_grid.block_nbytes(x.chunks, x.dtype.itemsize).max()) // max(row, 1))
    chunks = chunk_grid.normalize((per,) + shape[1:], shape, x.dtype)
    out = result_like(flat, shape, x.dtype, chunks, lambda lo: [int(np.ravel_multi_index(lo, shape))])
    blockwise.run(Reshape(flat.shape, shape), out, [flat], "mask-shape")
    return out


def _interleaved(x, lines, pieces, blocks, sizes, starts, edges):
    """The result in C order from the pieces of ``blocks`` (see the module notes)."""
    nrow = x.numblocks[0]
    per_row = np.zeros(nrow, dtype=np.int64)
    chunks_of = [[] for _ in range(nrow)]
    for b, size, start in zip(blocks, sizes, starts):
        per_row[b[0]] += size
        chunks_of[b[0]].append((b, int(start)))
    out_starts = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
    # Spread over the row block's chunks with a piece: each run reads them all.
    runs, picks = row_runs(x, per_row, [[b for b, _ in c] for c in chunks_of])
    total = int(out_starts[-1])
    out = type(x).allocated((total,), x.dtype, (tuple(runs),), colocate=(x, picks), client=x.client, zero=False)
    blockwise.run(Interleave(out_starts, edges, chunks_of), out, [pieces, lines], "mask-order")
    return out
