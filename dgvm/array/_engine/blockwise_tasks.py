"""The bodies of array operations' tasks on a worker (``blockwise`` sends them).

``blockwise_here`` makes each output chunk of a blockwise op where it lives;
``collect_here`` and ``collect_tree_here`` compute a reduction's partial per chunk (of a
stored array, or of a deferred elementwise tree computed chunk by chunk and never stored);
``block_from_store`` hands one chunk to a dask graph (``dgvm.array.to_dask``).

Each body runs its operation within the worker's working-memory budget
(``dgvm.backends.working_memory``): running out of it, or of the device, on a chunk is a
``dgvm.OutOfDeviceMemory`` naming the operation, the chunk and the worker, and that chunk
keeps its values.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import fused, packed
from dgvm.array._engine.tree_op import Reads
from dgvm.backends import working_memory
from dgvm.protocol.errors import DgvmError, OutOfDeviceMemory
from dgvm.protocol.messages import TASK_PREFIX
from dgvm.protocol.records import ArraySpec
from dgvm.worker.access import Access
from dgvm.worker.tasks import current_key, device_task, write_chunks


# Partials up to this size stay on the device until the task's last chunk is queued, so
# that the device waits once per task, and are then packed; larger ones (sorted chunks,
# ...) come to the host at once rather than pile up in device memory.
SMALL_PARTIAL = packed.PACKED


def blockwise_here(op, out: ArraySpec, specs, indices, deps):
    access = Access.here()
    xp = access.store.backend.xp
    read = Reads(lambda i, lo, hi: access.read(specs[i], lo, hi, xp), specs,
                 ahead=lambda i, lo, hi: access.prefetch(specs[i], lo, hi))

    # Ops that can write in place (elementwise, assignment) skip the temporary.
    into = getattr(op, "block_into", None)

    def compute(k):
        lo, hi = out.bounds(k)
        target = access.chunk(out, k)
        if not (into and access.store.is_home(out.alloc_id, k) and into(read, lo, hi, xp, target)):
            access.put_result(out, k, target, op.block(read, lo, hi, xp))

    def per_chunk(k):
        bounded(access, op, out, k, lambda: compute(k))

    # An op's own errors (NumPy's, CuPy's) come back as they are; running out of memory
    # as OutOfDeviceMemory.
    with working_memory.operation(access.store.backend):
        return write_chunks(access, out, indices, f"operation {type(op).__name__}", per_chunk,
                            kernel_errors=False)


def bounded(access: Access, op, spec: ArraySpec, k: int, fn):
    """``fn()``, the work of ``op`` on chunk ``k`` of ``spec``; running out of memory there
    (``working_memory.is_out_of_memory``) raised as ``OutOfDeviceMemory`` naming them."""
    try:
        return fn()
    except DgvmError:
        raise
    except Exception as e:
        if not working_memory.is_out_of_memory(e):
            raise
        message = out_of_memory_message(access, op, spec, k, e)
    # Raised here, outside the handler: the original error and its frames (which hold the
    # operation's temporaries) go now, not with the failed task Dask keeps.
    raise OutOfDeviceMemory(message)


def out_of_memory_message(access: Access, op, spec: ArraySpec, k: int, e: BaseException) -> str:
    key = str(current_key(access) or "")
    name = key[len(TASK_PREFIX):].rsplit("-", 1)[0] if key.startswith(TASK_PREFIX) else ""
    what = f"{name} ({type(op).__name__})" if name else type(op).__name__
    backend = access.store.backend
    return (f"operation {what} ran out of device memory on chunk {k} (block {spec.block(k)}) "
            f"of allocation {spec.alloc_id} on worker {access.worker.address}: "
            f"{type(e).__name__}: {e}. Working-memory budget {backend.working_budget()} bytes "
            f"(dgvm.working-memory, default placement.headroom x the device's capacity), "
            f"{backend.free} bytes of the device free of chunks. The chunk keeps its values; "
            "use smaller chunks, free arrays or raise the budget.")


def _small_or_host(value):
    if isinstance(value, tuple):
        return tuple(_small_or_host(v) for v in value)
    return value if getattr(value, "nbytes", 0) <= SMALL_PARTIAL else packed.host(value)


def _fold_in(fold, total, partial, xp):
    """``partial`` combined into ``total`` (None: the first) by ``fold``. The partials
    folded together have one shape (the block's extent off the reduced axes): all stay on
    the device, or all went to the host (``_small_or_host``), and are combined there."""
    return fold.add(total, partial, np if isinstance(partial, np.ndarray) else xp)


def _collect_chunks(access, op, spec: ArraySpec, indices, partial_of) -> packed.Packed:
    """The body of a collect task: ``partial_of(k, lo, hi)`` for each chunk ``k`` (the
    store locked), kept on the device while small; one wait for the device (the values
    go to the host anyway; this one names a fault); block index -> host value, packed
    (``packed``: one copy to the host and one buffer to send per dtype)."""
    out = {}
    backend = access.store.backend
    fold = getattr(op, "fold", None)  # (partials along the reduced axes: combined here)
    with working_memory.operation(backend):
        with device_task(access, f"reduction {type(op).__name__}", spec, indices, may_leave=False):
            for k in indices:
                lo, hi = spec.bounds(k)
                with access.output_chunk():
                    if fold is None:
                        out[spec.block(k)] = bounded(access, op, spec, k,
                                                     lambda: _small_or_host(partial_of(k, lo, hi)))
                    else:
                        into = fold.block(spec.block(k))
                        out[into] = bounded(access, op, spec, k, lambda: _fold_in(
                            fold, out.get(into), _small_or_host(partial_of(k, lo, hi)), backend.xp))
            laid = packed.lay_out(out, backend.xp)  # (queued before the one wait)
        return packed.to_host(laid)


def collect_here(op, spec: ArraySpec, indices, deps):
    access = Access.here()
    xp = access.store.backend.xp
    return _collect_chunks(access, op, spec, indices,
                           lambda k, lo, hi: op.partial(access.chunk(spec, k), lo, hi, xp))


def collect_tree_here(op, tree, dtype, specs, grid: ArraySpec, indices, deps):
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


def block_from_store(spec: ArraySpec, k: int):
    """A task of ``to_dask``'s graph: chunk ``k`` of an array as a new array of the
    worker's kind (NumPy on ``cpu``, CuPy on ``cuda``)."""
    access = Access.here()
    with access.output_chunk():
        return access.chunk(spec, k).copy()
