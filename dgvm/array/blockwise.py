"""Owner computes for array operations: each output chunk is made on the worker that holds it.

An operation is a small picklable object with ``block(read, lo, hi, xp)``: given the global
element range ``[lo, hi)`` of one output chunk, it reads the input regions it needs with
``read(i, lo_i, hi_i)`` (local chunks are views; anything else is fetched through the
migration layer and kept as a replica) and returns the chunk's values as an ``xp`` array.
One Dask task per worker covers all of that worker's output chunks, ordered after the
launches that wrote the inputs (``dgvm.kernels.launch.dispatch``).
"""

from __future__ import annotations

import uuid

import numpy as np

from dgvm import chunk_grid
from dgvm.array import fused
from dgvm.array.deferred import host_value
from dgvm.errors import detached_task_errors
from dgvm.kernels.access import Access, ArraySpec
from dgvm.kernels.launch import add_readers, device_task, dispatch, unfinished, write_chunks


def run(op, out, inputs, name: str) -> None:
    """Compute every chunk of ``out`` with ``op`` from the DArrays ``inputs`` (asynchronous)."""
    if out.size == 0:  # no chunk (dgvm.array.zero_size; random draws reach here unwrapped)
        return
    specs = [ArraySpec.of(a) for a in inputs]
    dispatch(_blockwise_here, out, list(inputs), name, op, ArraySpec.of(out), specs,
             aligned=getattr(op, "aligned", False))


def _blockwise_here(op, out: ArraySpec, specs, indices, deps):
    access = Access.here()
    xp = access.store.backend.xp

    def read(i, lo, hi):
        return access.read(specs[i], lo, hi, xp)

    # Ops that can write in place (elementwise, assignment) skip the temporary.
    into = getattr(op, "block_into", None)

    def per_chunk(k):
        lo, hi = out.bounds(k)
        target = access.chunk(out, k)
        if not (into and access.store.is_home(out.alloc_id, k) and into(read, lo, hi, xp, target)):
            access.put_result(out, k, target, op.block(read, lo, hi, xp))

    # An op's own errors (NumPy's, CuPy's) come back as they are.
    return write_chunks(access, out, indices, f"operation {type(op).__name__}", per_chunk, kernel_errors=False)


def collect(op, x, name: str) -> dict[tuple, object]:
    """Run ``op.partial(chunk, lo, hi, xp)`` on every chunk of ``x`` where it lives (one
    task per worker, after the launches that write ``x``) and bring the small results
    back: block index -> host value (NumPy arrays, or tuples of them).

    A deferred elementwise ``x`` is not materialized: each chunk of the tree is computed
    (one fused pass into a scratch buffer) and reduced at once on the worker that would
    hold it (with a leaf read as it is, or where the chunk of a view's input holding its
    first element lives), so ``(x + x.T).sum()`` and ``x[::3].sum()`` store nothing."""
    from dgvm.array.elementwise import Elementwise, result_placement

    if host_value(x) is not None:  # its values are here: no task, nothing stored
        return _collect_on_caller(op, x)
    d = x._deferred
    where = d and result_placement(x, d)
    if where is not None:
        tree = Elementwise.of(d.expr, d.inputs, d.views, x.shape)
        specs = [ArraySpec.of(a) for a in d.inputs]
        grid = ArraySpec(-1, "", x.shape, x.dtype.str, x.chunks)  # x's chunks, not stored
        fn, args, readers = _collect_tree_here, (tree, x.dtype, specs, grid), d.inputs
        homes = _homes_of(where)
    else:
        fn, args, readers = _collect_here, (ArraySpec.of(x),), [x]
        homes = x.alloc.by_home()
    client = x.client
    deps = unfinished([f for a in readers for f in a._pending.writes])
    futures = [
        client.submit(
            fn, op, *args, idx, deps, workers=[w],
            allow_other_workers=False, pure=False, key=f"dgvm-{name}-{uuid.uuid4().hex[:10]}",
        )
        for w, idx in homes.items()
    ]
    add_readers(readers, futures)
    out = {}
    with detached_task_errors():
        parts = client.gather(futures, direct=True)
    for part in parts:
        out.update(part)
    return out


def _collect_on_caller(op, x) -> dict[tuple, object]:
    value = host_value(x)
    out = {}
    for k, sl in enumerate(chunk_grid.block_slices(x.chunks)):
        lo, hi = [s.start for s in sl], [s.stop for s in sl]
        out[chunk_grid.block_index(k, x.numblocks)] = op.partial(value[sl], lo, hi, np)
    return out


def chunk_homes(where) -> list[str] | None:
    """The home of each chunk of a result placed by ``where`` (a ``colocate=`` value): a
    DArray of the same chunks, or ``(source, picks)`` (chunk k goes to the home of source
    chunk picks[k]); None for the other forms (an allocation id, a buffer)."""
    source, picks = where if isinstance(where, tuple) else (where, None)
    alloc = getattr(source, "alloc", None)
    if alloc is None:
        return None
    homes = alloc.homes()
    return homes if picks is None else [homes[int(p)] for p in picks]


def _homes_of(where) -> dict[str, list[int]]:
    """Worker -> chunk indices, for ``result_placement``'s answer."""
    if not isinstance(where, tuple):
        return where.alloc.by_home()  # grouped once per chunk map
    out: dict[str, list[int]] = {}
    for k, w in enumerate(chunk_homes(where)):
        out.setdefault(w, []).append(k)
    return out


# Partials up to this size stay on the device until the task's last chunk is queued, so
# that the device waits once per task; larger ones (sorted chunks, ...) come to the host
# at once rather than pile up in device memory.
SMALL_PARTIAL = 1 << 20


def _small_or_host(value):
    if isinstance(value, tuple):
        return tuple(_small_or_host(v) for v in value)
    return value if getattr(value, "nbytes", 0) <= SMALL_PARTIAL else _host(value)


def _host(value):
    if isinstance(value, tuple):
        return tuple(_host(v) for v in value)
    return value.get() if hasattr(value, "get") else value


def _collect_chunks(access, op, spec: ArraySpec, indices, partial_of) -> dict:
    """The body of a collect task: ``partial_of(k, lo, hi)`` for each chunk ``k`` (the
    store locked), kept on the device while small; one wait for the device (the values
    go to the host anyway; this one names a fault); block index -> host value."""
    out = {}
    with device_task(access, f"reduction {type(op).__name__}", spec, indices, may_leave=False):
        for k in indices:
            lo, hi = spec.bounds(k)
            with access.output_chunk():
                out[spec.block(k)] = _small_or_host(partial_of(k, lo, hi))
    return {b: _host(v) for b, v in out.items()}


def _collect_here(op, spec: ArraySpec, indices, deps):
    access = Access.here()
    xp = access.store.backend.xp
    return _collect_chunks(access, op, spec, indices,
                           lambda k, lo, hi: op.partial(access.chunk(spec, k), lo, hi, xp))


def _collect_tree_here(op, tree, dtype, specs, grid: ArraySpec, indices, deps):
    access = Access.here()
    xp = access.store.backend.xp

    def read(i, lo, hi):
        return access.read(specs[i], lo, hi, xp)

    reduction = getattr(op, "reduction", None)  # (fn, axes, dtype) a fused kernel can end with

    def partial_of(k, lo, hi):
        shape = [h - l for l, h in zip(lo, hi)]
        leaves = tree.leaves(read, lo, hi, xp)
        # One pass where it can: the tree's values are never stored.
        partial = reduction and fused.reduce_tree(tree.stripped, leaves, xp, *reduction, shape)
        if partial is None:
            # The tree of an array of this dtype: its root casts to it.
            scratch = access.scratch(shape, dtype)
            tree.leaves_into(leaves, xp, scratch)
            # A partial may be a view of the chunk (a head, a slice): copied off the
            # scratch before the next chunk overwrites it.
            partial = _detached(op.partial(scratch, lo, hi, xp), scratch, xp)
        return partial

    return _collect_chunks(access, op, grid, indices, partial_of)


def _detached(value, scratch, xp):
    if isinstance(value, tuple):
        return tuple(_detached(v, scratch, xp) for v in value)
    if isinstance(value, xp.ndarray) and xp.may_share_memory(value, scratch):
        return value.copy()
    return value


def assemble(parts: dict[tuple, np.ndarray], grid: tuple):
    """Host arrays per block -> one array, blocks placed by their grid position."""
    if not grid:
        return np.asarray(parts[()])

    def nest(prefix):
        if len(prefix) == len(grid):
            return np.asarray(parts[tuple(prefix)])
        return [nest(prefix + [i]) for i in range(grid[len(prefix)])]

    return np.block(nest([]))
