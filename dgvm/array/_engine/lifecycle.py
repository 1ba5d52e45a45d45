"""Freeing an array's memory when the last reference to it goes away.

NumPy-style loops make a new array per step; without this they would fill device memory.
The release runs on the client's event loop (a finalizer may run in any thread, even in
the middle of another request): it waits for the tasks that still use the array, then
frees the allocation in the GVAT, unless ``recycle`` keeps it for the next result of the
same layout.

This state is per client session (``Releases``, a part of
``dgvm.client.session.session_of(client)``): two clients in one process share none of
it, and a fresh client starts with none. A finalizer gets its session's ``Releases`` when
it is made (in the user's thread), never looks it up: a lookup takes locks that the
thread a garbage collection interrupts may hold.

An array held only through a reference cycle is released by a garbage collection, not
before: one that a failed call's error holds (the frames of its traceback hold the array,
and the error is in a cycle with them), and the arrays a deferred one like it reads.
``drain`` collects first (``collect_garbage``).
"""

from __future__ import annotations

import atexit
import gc
import threading
import time
import weakref

from dgvm.client import direct
from dgvm.array._engine.recycle import KeptAllocations, client_running
from dgvm.client.session import session_of
from dgvm.protocol import messages
from dgvm.protocol.errors import NotConnected


class Releases:
    """A client session's releases of unreachable arrays and its kept allocations."""

    def __init__(self, session):
        # Reentrant: a finalizer may run (a garbage collection) while this thread holds it.
        self._lock = threading.RLock()
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        self.exiting = False
        self._session = session  # holds its client weakly: so does this
        self.kept = KeptAllocations(session, self.free_later)
        _every_releases.add(self)

    def release(self, alloc, shape, dtype, chunks) -> None:
        """An array of ``alloc`` became unreachable (its finalizer): keep the allocation
        for the next result of this layout, or free it once its tasks are done."""
        if alloc.freed or self.exiting:
            return
        alloc.freed = True
        futures = alloc.pending.take()
        if not client_running(alloc.client) or not self.kept.offer(alloc, shape, dtype, chunks, futures):
            self.free_later(alloc, futures)

    def free_later(self, alloc, futures) -> None:
        """Free ``alloc`` in the GVAT once ``futures`` are done, from the client's loop."""
        alloc.freed = True
        client = alloc.client
        if not client_running(client):
            return  # the cluster frees a closed client's memory itself
        with self._lock:
            self._in_flight += 1
        client.loop.add_callback(self._free_later, client, alloc.alloc_id, alloc.owner, futures)

    async def _free_later(self, client, alloc_id: int, owner: str, futures) -> None:
        try:
            if futures:
                # Wait for the tasks that use the memory; their errors belong to their callers.
                await direct.ended(client, futures)
            await messages.call(client.scheduler, messages.FREE, alloc_id=alloc_id, owner=owner)
        except Exception:  # noqa: BLE001  (the client or cluster is closing: nothing to free)
            pass
        finally:
            with self._lock:
                self._in_flight -= 1
                self._idle.notify_all()

    def drain(self, timeout: float = 30.0) -> bool:
        """Release the arrays unreachable now and wait until the releases started have
        reached the GVAT, the kept allocations freed too (tests, shutdown, an allocation
        short of room). False if that took over ``timeout`` s."""
        deadline = time.monotonic() + timeout
        if self._session.running():
            # The event loop first ends what it was doing: the error of a call that just
            # failed in this thread may still be held there, by the handle of the callback
            # that delivered it (with the arrays its traceback's frames hold).
            try:
                self._session.client.sync(_loop_turn, callback_timeout=timeout)
            except Exception:  # noqa: BLE001  (closing meanwhile, or a loop that never turned)
                pass
        collected = collect_garbage(deadline)
        self.kept.flush()
        with self._lock:
            done = self._idle.wait_for(lambda: self._in_flight == 0, max(0.0, deadline - time.monotonic()))
        return collected and done


async def _loop_turn() -> None:
    """Nothing, on the client's event loop (``client.sync`` returns after a turn of it)."""


def collect_garbage(deadline: float) -> bool:
    """A full garbage collection in this thread: every array unreachable now is released
    when this returns (its finalizer ran). False if none could run before ``deadline``
    (``time.monotonic()``).

    CPython collects in one thread at a time: ``gc.collect()`` returns at once, having
    collected nothing, while a collection runs in another thread (the client's event loop,
    an in-process cluster's workers), and that one may still be running the finalizers of
    arrays it found. A ``gc.callbacks`` entry tells whether a collection ran in this thread;
    until one did, this waits for the other and tries again. (A finalizer runs inside a
    collection: from one, this would wait until the deadline.)"""
    me = threading.get_ident()
    ran = threading.Event()

    def note(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2 and threading.get_ident() == me:
            ran.set()

    gc.callbacks.append(note)
    try:
        while True:
            gc.collect()
            if ran.is_set():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)  # another thread's collection: let it end
    finally:
        gc.callbacks.remove(note)


# Every session's releases in this process, for the one exit hook below.
_every_releases: "weakref.WeakSet[Releases]" = weakref.WeakSet()


@atexit.register
def _stop_releasing() -> None:
    # At exit the clusters and their memory go away together: nothing to free one by one.
    for releases in list(_every_releases):
        releases.exiting = True


def releases_of(client) -> Releases:
    """The ``Releases`` of ``client``'s session (None: the current client's)."""
    return session_of(client).part(Releases)


def release_when_unreachable(array, alloc) -> None:
    """Release ``alloc`` (``Releases.release``) once ``array`` is unreachable."""
    f = weakref.finalize(array, releases_of(alloc.client).release, alloc, array.shape, array.dtype, array.chunks)
    f.atexit = False  # at interpreter exit the cluster goes away with its memory


def drain_releases(client=None, timeout: float = 30.0) -> bool:
    """``Releases.drain`` of ``client``'s session (None: the current client's; with no
    client connected there is nothing to drain)."""
    try:
        releases = releases_of(client)
    except NotConnected:
        return collect_garbage(time.monotonic() + timeout)
    return releases.drain(timeout)
