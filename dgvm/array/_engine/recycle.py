"""Reuse the allocations of released arrays for the next results of the same layout.

A NumPy-style loop makes an array per step and drops the one before (``y = f(x)`` in a
loop, a benchmark's repeated chain). Freeing the dropped array and allocating the next
are two GVAT requests on the critical path of every step. Instead, an allocation released
because its array became unreachable is kept here if it held an operation's result
(made colocated with its inputs, written whole by its task), with the futures of the
tasks still running on it; the next result of the same shape, dtype, chunks and homes
whose every element its first task writes takes it over, ordered after those tasks
(CuPy's memory pool does the same for device buffers; here it is whole GVAT allocations).
The writer's report to the GVAT bumps the chunks' versions and drops their replicas, as
for any write.

One ``KeptAllocations`` per client session, owned by its ``lifecycle.Releases``. Bounded:
at most ``MAX_KEPT`` allocations wait, the oldest is freed first, an allocation refused
for room frees them all and is tried again, and ``lifecycle.drain_releases`` (tests,
shutdown) frees them. Explicit ``x.free()`` and ``with`` blocks always free at once.

Releases come from finalizers, which may run in any thread, even inside this module
during a garbage collection: ``offer`` only appends to a queue, and the callers that
take or free (in the user's thread) move the queue into the pool first.
"""

from __future__ import annotations

import collections
import threading

from dgvm.array._engine.placement import chunk_homes
from dgvm.client.pending import still_reading

# A solver's step releases a few results of one layout after their successors were made,
# and a deferred tree may hold several steps' results until it is computed.
MAX_KEPT = 16


def client_running(client) -> bool:
    return client.status in ("running", "connecting", "newly-created")


class KeptAllocations:
    """The released allocations of one client session kept for reuse; ``free_later(alloc,
    futures)`` frees one once its tasks are done (the owner's)."""

    def __init__(self, session, free_later):
        self._session = session  # holds its client weakly: so does this
        self._free_later = free_later
        self._lock = threading.Lock()
        self._offered: collections.deque = collections.deque()  # appends are atomic: safe anywhere
        # (shape, dtype, chunks) -> [(allocation, futures still running on it)]
        self._kept: "collections.OrderedDict[tuple, list]" = collections.OrderedDict()

    @staticmethod
    def _key(shape, dtype, chunks) -> tuple:
        return (tuple(shape), str(dtype), tuple(map(tuple, chunks)))

    def offer(self, alloc, shape, dtype, chunks, futures) -> bool:
        """Keep a released allocation for reuse; False if it is not kept (free it then)."""
        if not alloc.reusable:
            return False
        # Finished or failed tasks no longer touch the memory (and a failure must not pass
        # to the array that takes it over).
        self._offered.append((alloc, shape, dtype, chunks, still_reading(futures)))
        return True

    def _pool_offers(self) -> list:
        """Move the offered allocations into the pool (caller holds ``_lock``); returns the
        entries to free: past ``MAX_KEPT``, or all of them once the client is gone."""
        drop = []
        running = self._session.running()
        while self._offered:
            alloc, shape, dtype, chunks, futures = self._offered.popleft()
            if running:
                self._kept.setdefault(self._key(shape, dtype, chunks), []).append((alloc, futures))
            else:
                drop.append((alloc, futures))
        if not running:
            for entries in self._kept.values():
                drop.extend(entries)
            self._kept.clear()
        while sum(len(v) for v in self._kept.values()) > MAX_KEPT:
            key, entries = next(iter(self._kept.items()))
            drop.append(entries.pop(0))
            if not entries:
                del self._kept[key]
        return drop

    def _free(self, entries) -> None:
        for alloc, futures in entries:
            self._free_later(alloc, futures)

    def take(self, shape, dtype, chunks, colocate):
        """A kept allocation of this layout whose homes are those ``colocate`` gives, and the
        futures its first task must follow; None if there is none."""
        key = self._key(shape, dtype, chunks)
        with self._lock:
            drop = self._pool_offers()
            entries = self._kept.get(key)
        self._free(drop)
        if not entries:
            return None
        homes = chunk_homes(colocate)
        while True:
            with self._lock:
                entries = self._kept.get(key, [])
                # The chunk map it was released with: no request, as it is not refreshed while freed.
                for n, (alloc, futures) in enumerate(entries):
                    if alloc.homes() == homes:
                        del entries[n]
                        if not entries:
                            del self._kept[key]
                        break
                else:
                    return None
            alloc.freed = False
            if not alloc.stale:
                return alloc, futures
            # Its chunks moved since it was kept (a re-homing): where are they now?
            try:
                alloc.refresh()
                there = alloc.homes()  # (refreshes again if another move's news came meanwhile)
            except Exception:  # noqa: BLE001  (the GVAT no longer knows it: not reusable)
                self._free([(alloc, futures)])
                continue
            if there == homes:
                return alloc, futures
            alloc.freed = True  # kept for a result placed where its chunks are now
            with self._lock:
                self._kept.setdefault(key, []).append((alloc, futures))

    def flush(self) -> int:
        """Free every kept allocation; returns how many."""
        with self._lock:
            drop = self._pool_offers()
            kept = [entry for entries in self._kept.values() for entry in entries]
            self._kept.clear()
        self._free(drop + kept)
        return len(kept)
