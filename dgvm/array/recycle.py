"""Reuse the allocations of released arrays for the next results of the same layout.

A NumPy-style loop makes an array per step and drops the one before (``y = f(x)`` in a
loop, a benchmark's repeated chain). Freeing the dropped array and allocating the next
are two GVAT requests on the critical path of every step. Instead, an allocation released
because its array became unreachable is kept here if it held an operation's result
(made colocated with its inputs, written whole by its task), with the futures of the
tasks still using it; the next result of the same shape, dtype, chunks and homes whose every element
its first task writes takes it over, ordered after those tasks (CuPy's memory pool does
the same for device buffers; here it is whole GVAT allocations). The writer's report to
the GVAT bumps the chunks' versions and drops their replicas, as for any write.

Bounded: at most ``MAX_KEPT`` allocations wait here, the oldest is freed first, an
allocation refused for room frees them all and is tried again, and
``lifecycle.settle_releases`` (tests, shutdown) frees them. Explicit ``x.free()`` and
``with`` blocks always free at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_KEPT = 4

_lock = threading.Lock()
# (client id, shape, dtype, chunks, homes) -> [(allocation, futures still using it)]
_kept: "OrderedDict[tuple, list]" = OrderedDict()


def _key(client, shape, dtype, chunks, homes) -> tuple:
    return (client.id, tuple(shape), str(dtype), tuple(map(tuple, chunks)), tuple(homes))


def offer(alloc, shape, dtype, chunks, futures) -> bool:
    """Keep a released allocation for reuse; False if it is not kept (free it then)."""
    if not getattr(alloc, "reusable", False):
        return False
    from dgvm.array.lifecycle import free_later

    homes = [alloc.home(k) for k in range(alloc.nchunks)]
    evicted = []
    with _lock:
        _kept.setdefault(_key(alloc.client, shape, dtype, chunks, homes), []).append((alloc, futures))
        while sum(len(v) for v in _kept.values()) > MAX_KEPT:
            key = next(iter(_kept))
            evicted.append(_kept[key].pop(0))
            if not _kept[key]:
                del _kept[key]
    for old, waits in evicted:
        free_later(old, waits)
    return True


def take(client, shape, dtype, chunks, homes):
    """A kept allocation of this layout and homes, and the futures its first task must
    follow; None if there is none."""
    with _lock:
        entries = _kept.get(_key(client, shape, dtype, chunks, homes))
        if not entries:
            return None
        alloc, futures = entries.pop()
        if not entries:
            del _kept[_key(client, shape, dtype, chunks, homes)]
    if alloc.stale:  # its chunks moved since: the homes asked for may not be its own now
        alloc.freed = False
        alloc.refresh()
        if [alloc.home(k) for k in range(alloc.nchunks)] != list(homes):
            alloc.freed = True
            from dgvm.array.lifecycle import free_later

            free_later(alloc, futures)
            return None
    alloc.freed = False
    return alloc, futures


def flush(client=None) -> int:
    """Free every kept allocation (of ``client``, or all); returns how many."""
    from dgvm.array.lifecycle import free_later

    with _lock:
        keys = [k for k in _kept if client is None or k[0] == client.id]
        entries = [e for k in keys for e in _kept.pop(k)]
    for alloc, futures in entries:
        free_later(alloc, futures)
    return len(entries)
