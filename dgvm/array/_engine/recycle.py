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

Bounded: at most ``MAX_KEPT`` allocations wait here, the oldest is freed first, an
allocation refused for room frees them all and is tried again, and
``lifecycle.settle_releases`` (tests, shutdown) frees them. Explicit ``x.free()`` and
``with`` blocks always free at once.

Releases come from finalizers, which may run in any thread, even inside this module
during a garbage collection: ``offer`` only appends to a queue, and the callers that
take or free (in the user's thread) move the queue into the pool first.
"""

from __future__ import annotations

import collections
import threading

MAX_KEPT = 4

_lock = threading.Lock()
_offered: collections.deque = collections.deque()  # appends are atomic: safe anywhere
# (client id, shape, dtype, chunks) -> [(allocation, futures still running on it)]
_kept: "collections.OrderedDict[tuple, list]" = collections.OrderedDict()


def _key(client_id, shape, dtype, chunks) -> tuple:
    return (client_id, tuple(shape), str(dtype), tuple(map(tuple, chunks)))


def offer(alloc, shape, dtype, chunks, futures) -> bool:
    """Keep a released allocation for reuse; False if it is not kept (free it then)."""
    if not alloc.reusable:
        return False
    from dgvm.client.pending import still_reading

    # Finished or failed tasks no longer touch the memory (and a failure must not pass
    # to the array that takes it over).
    _offered.append((alloc, shape, dtype, chunks, still_reading(futures)))
    return True


def _settle_offers() -> list:
    """Move the offered allocations into the pool (caller holds ``_lock``); returns the
    entries to free: past ``MAX_KEPT``, or of a client that is gone."""
    from dgvm.array._engine.lifecycle import client_running

    drop = []
    while _offered:
        alloc, shape, dtype, chunks, futures = _offered.popleft()
        if not client_running(alloc.client):
            drop.append((alloc, futures))
            continue
        _kept.setdefault(_key(alloc.client.id, shape, dtype, chunks), []).append((alloc, futures))
    for key in [k for k, v in _kept.items() if not client_running(v[0][0].client)]:
        drop.extend(_kept.pop(key))  # a client gone
    while sum(len(v) for v in _kept.values()) > MAX_KEPT:
        key, entries = next(iter(_kept.items()))
        drop.append(entries.pop(0))
        if not entries:
            del _kept[key]
    return drop


def _free(entries) -> None:
    from dgvm.array._engine.lifecycle import free_later

    for alloc, futures in entries:
        free_later(alloc, futures)


def take(client, shape, dtype, chunks, colocate):
    """A kept allocation of this layout whose homes are those ``colocate`` gives, and the
    futures its first task must follow; None if there is none."""
    from dgvm.array._engine.blockwise import chunk_homes

    key = _key(client.id, shape, dtype, chunks)
    with _lock:
        drop = _settle_offers()
        entries = _kept.get(key)
    _free(drop)
    if not entries:
        return None
    homes = chunk_homes(colocate)
    with _lock:
        entries = _kept.get(key, [])
        # The chunk map it was released with: no request, as it is not refreshed while freed.
        for n, (alloc, futures) in enumerate(entries):
            if alloc.homes() == homes:
                del entries[n]
                if not entries:
                    del _kept[key]
                break
        else:
            return None
    alloc.freed = False
    if alloc.stale:  # its chunks moved since: its homes may not be the ones asked for
        try:
            alloc.refresh()
            moved = alloc.homes() != homes
        except Exception:  # noqa: BLE001  (the GVAT no longer knows it: not reusable)
            moved = True
        if moved:
            _free([(alloc, futures)])
            return None
    return alloc, futures


def flush(client=None) -> int:
    """Free every kept allocation (of ``client``, or all); returns how many."""
    with _lock:
        drop = _settle_offers()
        keys = [k for k in _kept if client is None or k[0] == client.id]
        kept = [entry for k in keys for entry in _kept.pop(k)]
    _free(drop + kept)
    return len(kept)
