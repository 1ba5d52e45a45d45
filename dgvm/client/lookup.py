"""Questions to the GVAT: translate an address, list allocations, list workers."""

from __future__ import annotations

from distributed import Client

from dgvm.client.session import call_scheduler
from dgvm.protocol import arguments, messages
from dgvm.protocol.records import AllocationInfo, Location, WorkerInfo


def translate(vaddr: int, client: Client | None = None) -> Location:
    """Where the byte at global address ``vaddr`` lives; ``InvalidAddress`` if nowhere."""
    return translate_many([arguments.integer("vaddr", vaddr)], client)[0]


def translate_many(vaddrs, client: Client | None = None) -> list[Location]:
    """``translate`` for many addresses in one request (the answer travels as columns)."""
    vaddrs = arguments.integers("vaddrs", vaddrs)
    t = call_scheduler(messages.TRANSLATE, client, vaddrs=vaddrs)
    return [
        Location(a, k, t.workers[h], t.devices[h], o, t.tiers[h])
        for a, k, o, h in zip(t.alloc_id, t.chunk_index, t.offset, t.home)
    ]


def table(alloc_id: int | None = None, chunks: bool = False, client: Client | None = None) -> list[AllocationInfo]:
    """A snapshot of the GVAT: one ``AllocationInfo`` per live allocation (with its
    ``ChunkInfo`` rows when ``chunks=True``)."""
    alloc_id = arguments.maybe_integer("alloc_id", alloc_id, 1)
    return call_scheduler(messages.TABLE, client, alloc_id=alloc_id, chunks=arguments.flag("chunks", chunks))


def workers(include_lost: bool = False, client: Client | None = None) -> list[WorkerInfo]:
    """A snapshot of the worker inventory: capacity, use and profile of each device."""
    include_lost = arguments.flag("include_lost", include_lost)
    return call_scheduler(messages.WORKERS, client, include_lost=include_lost)


def stats(client: Client | None = None) -> dict:
    """Access counters: ``{"workers": {address: {...}}, "allocations": {id: {...}}}`` with
    hits, misses, replicas, and count/bytes/seconds per transfer path."""
    return call_scheduler(messages.STATS, client)
