"""Freeing a DArray's memory when the last reference to it goes away.

NumPy-style loops make a new array per step; without this they would fill device memory.
The release runs on the client's event loop (a finalizer may run in any thread, even in
the middle of another request): it waits for the tasks that still use the array, then
frees the allocation in the GVAT, unless ``dgvm.array._engine.recycle`` keeps it for the next
result of the same layout.
"""

from __future__ import annotations

import atexit
import threading
import weakref


# Reentrant: a finalizer may run (a garbage collection) while this thread holds it.
_lock = threading.RLock()
_in_flight = 0
_idle = threading.Condition(_lock)
_exiting = False


@atexit.register
def _stop_releasing() -> None:
    # At exit the cluster and its memory go away together: nothing to free one by one.
    global _exiting
    _exiting = True


def release_when_unreachable(array, alloc) -> None:
    f = weakref.finalize(array, _release, alloc, array.shape, array.dtype, array.chunks)
    f.atexit = False  # at interpreter exit the cluster goes away with its memory


def _release(alloc, shape, dtype, chunks) -> None:
    from dgvm.array._engine import recycle

    if alloc.freed or _exiting:
        return
    alloc.freed = True
    futures = alloc.pending.take()
    # Kept for the next result of this layout (dgvm.array._engine.recycle), or freed.
    if not client_running(alloc.client) or not recycle.offer(alloc, shape, dtype, chunks, futures):
        free_later(alloc, futures)


def client_running(client) -> bool:
    return client.status in ("running", "connecting", "newly-created")


def free_later(alloc, futures) -> None:
    """Free ``alloc`` in the GVAT once ``futures`` are done, from the client's loop."""
    global _in_flight
    alloc.freed = True
    client = alloc.client
    if not client_running(client):
        return  # the cluster frees a closed client's memory itself
    with _lock:
        _in_flight += 1
    client.loop.add_callback(_free_later, client, alloc.alloc_id, alloc.owner, futures)


async def _free_later(client, alloc_id: int, owner: str, futures) -> None:
    global _in_flight
    try:
        if futures:
            # Wait for the tasks that use the memory; their errors belong to their callers.
            await client._gather(futures, errors="skip")
        await client.scheduler.dgvm_free(alloc_id=alloc_id, owner=owner)
    except Exception:  # noqa: BLE001  (the client or cluster is closing: nothing to free)
        pass
    finally:
        with _lock:
            _in_flight -= 1
            _idle.notify_all()


def settle_releases(timeout: float = 30.0) -> bool:
    """Wait until the releases already started have reached the GVAT (tests, shutdown)."""
    import gc

    from dgvm.array._engine import recycle

    gc.collect()
    recycle.flush()  # allocations kept for reuse are freed too
    with _lock:
        return _idle.wait_for(lambda: _in_flight == 0, timeout)
