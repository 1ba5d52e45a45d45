"""Questions to the GVAT: translate an address, list allocations, list workers."""

from __future__ import annotations

from distributed import Client

from dgvm.protocol.records import AllocationInfo, Location, WorkerInfo
from dgvm.client.session import call_scheduler


def translate(vaddr: int, client: Client | None = None) -> Location:
    """Where the byte at global address ``vaddr`` lives; ``InvalidAddress`` if nowhere."""
    return translate_many([vaddr], client)[0]


def translate_many(vaddrs, client: Client | None = None) -> list[Location]:
    """``translate`` for many addresses in one request (the answer travels as columns)."""
    c = call_scheduler("dgvm_translate", client, vaddrs=[int(v) for v in vaddrs])
    return [
        Location(a, k, c["workers"][h], c["devices"][h], o, c["tiers"][h])
        for a, k, o, h in zip(c["alloc_id"], c["chunk_index"], c["offset"], c["home"])
    ]


def table(alloc_id: int | None = None, chunks: bool = False, client: Client | None = None) -> list[AllocationInfo]:
    """A snapshot of the GVAT: one ``AllocationInfo`` per live allocation (with its
    ``ChunkInfo`` rows when ``chunks=True``)."""
    rows = call_scheduler("dgvm_table", client, alloc_id=alloc_id, chunks=chunks)
    return [AllocationInfo.from_dict(r) for r in rows]


def workers(include_lost: bool = False, client: Client | None = None) -> list[WorkerInfo]:
    """A snapshot of the worker inventory: capacity, use and profile of each device."""
    rows = call_scheduler("dgvm_workers", client, include_lost=include_lost)
    return [WorkerInfo.from_dict(r) for r in rows]


def stats(client: Client | None = None) -> dict:
    """Access counters: ``{"workers": {address: {...}}, "allocations": {id: {...}}}`` with
    hits, misses, replicas, and count/bytes/seconds per transfer path."""
    return call_scheduler("dgvm_stats", client)
