"""``dgvm.rebalance``: even out device memory by moving chunk homes."""

from __future__ import annotations

from distributed import Client

from dgvm.client.session import call_scheduler, current_client


def rebalance(client: Client | None = None) -> dict:
    """Move homes of this client's chunks so that every worker uses about the same
    fraction of its device memory (largest chunks first, only moves that bring both
    workers closer to it). Pending launches on this client's arrays finish first.
    Returns ``{"chunks": moved, "bytes": moved}``."""
    from dgvm.client.allocation import _live
    from dgvm.array.darray import live_arrays

    client = client or current_client()
    for x in list(live_arrays.values()):
        alloc = x._alloc  # never computes a deferred array
        if alloc is not None and alloc.client is client and not alloc.freed:
            x.settle()
    moved = call_scheduler("dgvm_rebalance", client, owner=client.id)
    for (owner, _), alloc in list(_live.items()):
        if owner == client.id:
            alloc.stale = True  # the "dgvm-moved" events may still be on their way
    return moved
