"""Owner computes for array operations: each output chunk is made on the worker that holds it.

An operation is a small picklable object with ``block(read, lo, hi, xp)``: given the global
element range ``[lo, hi)`` of one output chunk, it reads the input regions it needs with
``read(i, lo_i, hi_i)`` (local chunks are views; anything else is fetched through the
migration layer and kept as a replica) and returns the chunk's values as an ``xp`` array.
One Dask task per worker covers all of that worker's output chunks, ordered after the
tasks that wrote the inputs (``dgvm.client.dispatch``); the task bodies are
``blockwise_tasks``. A reduction's op has ``partial(chunk, lo, hi, xp)`` instead, run by
``collect`` where each chunk lives; its small results come back to the caller.

The arrays given here are read (their allocation, chunks, pending tasks, deferred tree),
never made.
"""

from __future__ import annotations

import math

import numpy as np

from dgvm.array._engine import blockwise_tasks, deferred, lineage
from dgvm.array._engine.placement import homes_of
from dgvm.array._engine.tree_op import Elementwise, result_placement
from dgvm.client.dispatch import add_readers, dispatch, gather, submit
from dgvm.client.ordering import TaskChunks, input_writers
from dgvm.client.session import session_of
from dgvm.protocol import chunk_grid
from dgvm.protocol.records import ArraySpec


def run(op, out, inputs, name: str, chunks=None) -> None:
    """Compute every chunk of ``out`` (or the chunk indices ``chunks``) with ``op`` from the
    arrays ``inputs`` (asynchronous)."""
    if out.size == 0:  # no chunk: held on the caller (``zero_size``)
        return
    if out.alias is not None:
        raise TypeError("blockwise.run writes arrays that own their memory; a view is written "
                        "through view_writes")
    lineage.recover([out, *inputs])  # what lost chunks is made again first, where it can be
    # A new result written whole from other arrays: this run makes it again (``lineage``).
    whole = out.fresh and chunks is None and all(a is not out for a in inputs)
    # A view is read as its copy (``ArrayCore.stored``), taken now: before this writes out.
    inputs = [a.stored() if a.alias is not None else a for a in inputs]
    specs = [ArraySpec.of(a) for a in inputs]
    dispatch(blockwise_tasks.blockwise_here, out, list(inputs), name, op, ArraySpec.of(out), specs,
             aligned=getattr(op, "aligned", False), chunks=chunks)
    if whole:
        out.made_by(lineage.Lineage.of_run(run, op, out, inputs, name))


def collect(op, x, name: str) -> dict[tuple, object]:
    """Run ``op.partial(chunk, lo, hi, xp)`` on every chunk of ``x`` where it lives (one
    task per worker, after the launches that write ``x``) and bring the small results
    back: block index -> host value (NumPy arrays, or tuples of them). Where ``op`` has a
    ``fold`` (``reduction_ops.Fold``), the partials of blocks along its reduced axes are
    combined, each worker's first: block of the reduced grid -> host value. Chunks of what it
    reads that were lost are made again from their lineage first (``lineage.retrying``).

    A deferred elementwise ``x`` is not materialized: each chunk of the tree is computed
    (one fused pass into a scratch buffer) and reduced at once on the worker that would
    hold it (with a leaf read as it is, or where the chunk of a view's input holding its
    first element lives), so ``(x + x.T).sum()`` and ``x[::3].sum()`` store nothing."""
    if x.host_value is not None:  # its values are here: no task, nothing stored
        return _collect_on_caller(op, x)
    deferred.reread([x])
    return lineage.retrying([x], lambda: _collect(op, x, name))


def _collect(op, x, name: str) -> dict[tuple, object]:
    d = x.deferred
    where = d and result_placement(x, d)
    if where is not None:
        deferred.evaluated(d)
        tree = Elementwise.of(d.expr, d.inputs, d.views, x.shape)
        specs = [ArraySpec.of(a) for a in d.inputs]
        grid = ArraySpec(-1, "", x.shape, x.dtype.str, x.chunks)  # x's chunks, not stored
        fn, args, readers = blockwise_tasks.collect_tree_here, (tree, x.dtype, specs, grid), d.inputs
        homes = homes_of(where)
        aligned = tree.aligned and all(a.chunks == x.chunks for a in readers)
    else:
        fn, args, readers = blockwise_tasks.collect_here, (ArraySpec.of(x),), [x]
        homes = x.alloc.by_home()
        aligned = True
    if aligned:  # each worker's task reads its chunks' block indices of each input only
        touched, writers = session_of(x.client).part(TaskChunks), input_writers(readers)
        deps = {w: touched.after(idx, True, [], writers) for w, idx in homes.items()}
    else:
        deps = [f for a in readers for f in a.pending.writers()]
    futures = submit(x.client, fn, (op, *args), homes, deps, name, rerun="reads")
    session_of(x.client).part(TaskChunks).wrote_nothing(futures)
    add_readers(readers, futures)
    out, fold = {}, getattr(op, "fold", None)
    for part in gather(x.client, futures, direct=True):
        for block, value in part.unpack().items():  # (``packed``)
            _put(out, fold, block, value)
    return out


def _collect_on_caller(op, x) -> dict[tuple, object]:
    value = x.host_value
    out, fold = {}, getattr(op, "fold", None)
    for k, sl in enumerate(chunk_grid.block_slices(x.chunks)):
        lo, hi = [s.start for s in sl], [s.stop for s in sl]
        _put(out, fold, chunk_grid.block_index(k, x.numblocks), op.partial(value[sl], lo, hi, np))
    return out


def _put(out: dict, fold, block: tuple, value) -> None:
    """``value``, the partial of ``block``, into ``out``; with the op's ``fold``, into its
    block of the reduced grid, combined with the partials already there."""
    if fold is None:
        out[block] = value
    else:
        block = fold.block(block)
        out[block] = fold.add(out.get(block), value, np)


def assemble(parts: dict[tuple, np.ndarray], grid: tuple):
    """Host arrays per block -> one array, blocks placed by their grid position."""
    if not grid:
        return np.asarray(parts[()])

    parts = {b: np.asarray(p) for b, p in parts.items()}
    if len(parts) != math.prod(grid):  # (a block missing would leave its place unset)
        raise ValueError(f"{len(parts)} blocks for a grid of {grid}")
    if any(p.ndim != len(grid) for p in parts.values()):
        def nest(prefix):
            if len(prefix) == len(grid):
                return parts[tuple(prefix)]
            return [nest(prefix + [i]) for i in range(grid[len(prefix)])]

        return np.block(nest([]))
    # As np.block would, into one array made first (np.block's checks and nesting cost
    # more than the copies for the small partials of a reduction).
    first = (0,) * len(grid)
    edges = []
    for axis, n in enumerate(grid):
        sizes = [parts[first[:axis] + (i,) + first[axis + 1:]].shape[axis] for i in range(n)]
        edges.append(np.concatenate([[0], np.cumsum(sizes)]).astype(int))
    out = np.empty(tuple(int(e[-1]) for e in edges), dtype=np.result_type(*parts.values()))
    for b, p in parts.items():
        box = tuple(slice(e[i], e[i + 1]) for e, i in zip(edges, b))
        if out[box].shape != p.shape:
            raise ValueError(f"block {b} has shape {p.shape}, its place in the grid {out[box].shape}")
        out[box] = p
    return out
