"""The bodies of dgvm's tasks on a worker, and what every one of them ends with.

Tasks arrive through ``dgvm.client.dispatch`` (one per worker, covering that worker's
chunks). Each body finds the worker's chunk store through ``Access.here()``, writes or
reads its chunks with the store locked, waits for the device at most once, and reports
what it wrote and read to the GVAT on the worker's stream.
"""

from __future__ import annotations

import contextlib
import traceback

from distributed.protocol import to_serialize
from distributed.utils import sync

from dgvm import config, dask_compat, streams
from dgvm.protocol import messages
from dgvm.protocol.errors import ChunkLost, ConnectionBroke, DgvmError, InvalidAddress, KernelError
from dgvm.protocol.messages import TASK_PREFIX
from dgvm.protocol.records import ArraySpec
from dgvm.worker.access import Access
from dgvm.worker import direct
from dgvm.worker.context_loss import ended_note

FORWARD_RETRIES = 8  # homes a forwarded chunk follows (moves keep coming while it travels)


def apply_here(alloc_id: int, owner: str, fn, args, indices: list[int], deps):
    """``map_chunks``' task: ``fn(xp, chunk_u8_view, index, *args)`` for each chunk. ``fn``
    may write the chunk: the GVAT hears that it did (read replicas go, backups copy it)."""
    access = Access.here()
    store = access.store
    xp = store.backend.xp
    out = []
    try:
        with store.lock:  # no free or copy of these chunks while fn runs
            for i in indices:
                store.wait_writable(alloc_id, i)  # fn may write it: not while a move copies it
                store.chunk(alloc_id, i, owner)  # validates owner and presence
                out.append(fn(xp, store.view(alloc_id, i), i, *args))
                store.wrote(alloc_id, i)
            store.backend.synchronize()
    finally:
        if out:
            send_report(access, alloc_id, list(indices[:len(out)]), {})
    return out


def current_key(access: Access) -> str | None:
    """The key of the task running in this thread (None outside one)."""
    task = direct.running()
    if task is not None:
        return task[1]
    try:
        return access.worker.get_current_task()
    except (KeyError, AttributeError):
        return None


def send_report(access: Access, alloc_id: int, wrote: list, reads: dict) -> None:
    """Hand the REPORT of a task's writes and reads to the worker's stream (see ``report``),
    or, for a task of the direct plane, to the plane, which sends it before answering."""
    worker = access.worker
    message = messages.report(alloc_id, wrote, reads, access.store.stats.to_dict(), current_key(access))
    task = direct.running()
    if task is not None:
        # The plane waits for it only where that counts: copies elsewhere must drop or
        # take the write first; chunks read from other workers may move here (re-homing),
        # and the caller sees those moves and misses once the operation is done, as the
        # cost of a remote read anyway is a round trip.
        # (With the number of the last export of this store: the GVAT's answer clears the
        # written chunks' export marks up to it, ``ChunkStore.copies_dropped``.)
        urgent = (bool(wrote) and access.store.may_have_copies(alloc_id, wrote)) or any(
            r["remote"] for r in reads.values())
        task[2].append((message, urgent, access.store.exports))
        return
    worker.loop.add_callback(streams.send_small, worker.batched_stream, message)


def report(out: ArraySpec, indices, access: Access) -> None:
    """Tell the GVAT what a task wrote and read: it counts hits and misses, bumps the
    written chunks' versions, drops their replicas and may move chunks read here often
    enough. The report travels on the worker's batched stream, handed over before the
    task returns: the scheduler handles it (awaiting the drops and moves) before the
    task's completion, which comes after it on the same stream, so no later task sees a
    stale replica, and the task itself does not wait. Output chunks whose home moved
    away after the task was placed (``access.forwarded``) go to their new home first."""
    for k, result in access.forwarded:
        forward(access, out, k, to_serialize(access.store.backend.to_host(result)))
    done = {k for k, _ in access.forwarded}
    reads = {
        str(a): {**r, "home": sorted(r["home"]), "remote": sorted(r["remote"])}
        for a, r in access.reads.items()
    }
    # the store's counters with this task's reads in them: the dashboard has them when
    # the task's completion is known, not only at the worker's next heartbeat
    send_report(access, out.alloc_id, [k for k in indices if k not in done], reads)


def forward(access: Access, out: ArraySpec, k: int, data) -> None:
    """Write chunk ``k``'s new value at its home, wherever the GVAT says it is now: it may
    move on (or its home leave, and a copy take over) while the write travels, and then
    the write goes to the next home. The home's write handler bumps the version and drops
    replicas itself."""
    worker = access.worker
    for attempt in range(FORWARD_RETRIES):
        where = access.locate(out.alloc_id, k)
        try:
            sync(worker.loop, access.transfers.left_peers.call, where.home,
                 # (required: a home that is closing answers ConnectionBroke, not a write taken)
                 messages.call(worker.rpc(where.home), messages.WRITE, required=True, alloc_id=out.alloc_id,
                               owner=out.owner, pieces=[[k, 0, data]], key=current_key(access)),
                 lambda: ChunkLost(f"chunk {k} of allocation {out.alloc_id}: its home {where.home} "
                                   "left the cluster while the chunk was written there"))
            return
        except (InvalidAddress, ChunkLost):
            if attempt == FORWARD_RETRIES - 1 or access.locate(out.alloc_id, k).home == where.home:
                raise


def write_chunks(access: Access, out: ArraySpec, indices, what: str, per_chunk, kernel_errors: bool,
                 writes: bool = True) -> int:
    """The body of a task that writes chunks ``indices`` of ``out`` here: ``per_chunk(k)``
    for each (the store locked), at most one wait for the device for the whole task (it
    runs one chunk while the next is queued; one stream, so a buffer freed meanwhile is
    reused only after the work queued on it; ``device_task``), then the report to
    the GVAT. The chunks written are reported also when a later one fails: their
    replicas elsewhere must go.

    ``kernel_errors``: a failure in ``per_chunk`` comes back as a ``KernelError`` naming
    ``what``, the chunk and the worker (else as raised). A device fault found by the wait
    is a ``KernelError`` for the task's chunks either way. ``writes=False``: ``per_chunk``
    leaves ``out`` as it is (a staged launch); only the reads are reported."""
    written = []
    # Run again after its worker left: the chunks its first run wrote for good (copies of
    # them hold the write) are not written twice; all of them if it had finished there
    # (later tasks may have written them since).
    again = access.store.done_writing
    done = again.pop(current_key(access), None) if writes and again else None
    if done == messages.ALL_WRITTEN:
        return len(indices)
    done = done or ()
    try:
        with device_task(access, what, out, indices):
            store = access.store
            for k in indices:
                try:
                    with access.output_chunk():
                        if writes:  # not while a move copies it away (then it may be gone)
                            store.wait_writable(out.alloc_id, k)
                        if (out.alloc_id, k) in done:
                            written.append(k)  # (its copies are refreshed again: harmless)
                            continue
                        per_chunk(k)
                        if writes and store.is_home(out.alloc_id, k):
                            store.wrote(out.alloc_id, k)
                except Exception as e:
                    if kernel_errors and isinstance(e, ConnectionBroke):  # reading its inputs: not the kernel's
                        raise ConnectionBroke(f"{what} on chunk {k} of allocation {out.alloc_id} did not run: "
                                              f"{e}") from None
                    if not kernel_errors or isinstance(e, DgvmError):
                        raise
                    raise kernel_error(what, out, [k], access, e) from None
                written.append(k)
    finally:
        # A fault that ended the device context leaves nothing here readable: the chunks
        # stay as their copies hold them (lost without copies), not reported as written.
        wrote = written if writes and not access.store.backend.context_ended else []
        if wrote or access.reads:
            report(out, wrote, access)
    return len(indices)


def finish_on_device(access: Access, what: str, out: ArraySpec, indices, may_leave: bool = True) -> None:
    """End a task's device work: leave it running when ``may_leave`` and another dgvm
    task is ready on this worker (that one, or the last of the run, waits:
    ``dgvm.backends.queued_work``), else wait for the device. A fault found by the wait is
    a ``KernelError`` for the task's chunks, which names the work earlier tasks left
    running: the fault may be theirs."""
    backend = access.store.backend
    queued = backend.queued
    if (may_leave and backend.one_stream and config.get("dispatch.device-wait") == "last"
            and next_task_waits(access.worker)):
        queued.leave(f"{what} on chunks {_span(indices)} of allocation {out.alloc_id}")
        return
    earlier = queued.named()
    try:
        backend.synchronize()
    except Exception as e:  # a fault ends the CUDA context
        err = kernel_error(what, out, indices, access, e)
        if earlier:
            err = KernelError(f"{err}; queued before it without a wait: {'; '.join(earlier)}")
        raise err from None


@contextlib.contextmanager
def device_task(access: Access, what: str, out: ArraySpec, indices, may_leave: bool = True):
    """The part of a task that queues device work for chunks ``indices`` of ``out``; then
    ``finish_on_device``. A body that fails waits for the device all the same: an
    earlier task may have left its work running for this one. The body's own error is
    the one raised; a device fault found then is raised by the next task that waits."""
    try:
        yield
    except BaseException:
        backend = access.store.backend
        with contextlib.suppress(Exception):
            backend.synchronize()
        raise
    finish_on_device(access, what, out, indices, may_leave)


def next_task_waits(worker) -> bool:
    """Is another dgvm task ready to run on ``worker``, waiting only for a thread or for
    the running task (``DirectTasks.ready``)? It finishes its own device work after this
    task's (``finish_on_device``)."""
    plugin = getattr(worker, "plugins", {}).get(messages.STORE_PLUGIN)
    if plugin is not None and plugin.direct.ready():
        return True
    try:
        return any(str(key).startswith(TASK_PREFIX) for key in dask_compat.ready_task_keys(worker))
    except RuntimeError:  # the event loop, which owns them, changed one meanwhile: wait
        return False


def _span(indices) -> str:
    indices = list(indices)
    return str(indices) if len(indices) <= 4 else f"[{indices[0]}, ..., {indices[-1]}] ({len(indices)})"


def kernel_error(what: str, out: ArraySpec, indices, access: Access, e: Exception) -> KernelError:
    """``e``, raised by ``what`` on chunks ``indices`` of ``out`` here, as the caller's
    ``KernelError`` naming the kernel, the chunk (block) and the worker, with the traceback."""
    where = f"of allocation {out.alloc_id} on worker {access.worker.address}"
    ended = ended_note(access.store.backend, access.worker.address)
    if len(indices) == 1:
        block = out.block(indices[0])
        return KernelError(f"{what} failed on chunk {indices[0]} (block {block}) {where}: "
                           f"{type(e).__name__}: {e}{ended}\n{traceback.format_exc()}")
    return KernelError(f"{what} failed on chunks {list(indices)} {where}: {type(e).__name__}: {e}{ended}")
