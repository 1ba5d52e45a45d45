"""``dgvm.rebalance``: even out device memory by moving chunk homes."""

from __future__ import annotations

from distributed import Client
from dgvm.client.direct import wait as wait_tasks

from dgvm.client.allocation import LiveAllocations, live_allocations
from dgvm.client.session import call_scheduler, client_or_current, session_of
from dgvm.protocol import messages


def rebalance(client: Client | None = None) -> dict:
    """Move homes of this client's chunks so that every worker uses about the same
    fraction of its device memory (largest chunks first, only moves that bring both
    workers closer to it). Pending launches on this client's arrays finish first.
    Returns ``{"chunks": moved, "bytes": moved}``."""
    client = client_or_current(client)
    mine = live_allocations(client)
    wait_tasks([f for a in mine for f in a.pending.all()])  # their errors are their callers'
    moved = call_scheduler(messages.REBALANCE, client, owner=client.id)
    session_of(client).part(LiveAllocations).all_stale()
    return moved
