"""One snapshot of the GVAT, shared by the dashboard pages, the JSON API and Prometheus.

It is built from the GVAT plugin's in-memory state and the workers' last heartbeats (their
counters as of their last launch report where that is later: ``counters.latest``), with
no RPC and no await, so it can run inside a Bokeh callback or an HTTP handler on the
scheduler's event loop. Its rows are ``dgvm.table()`` and ``dgvm.workers()`` rows (made by
the same GVAT and plugin methods) with a few fields added; its ``stats`` has the shape of
``dgvm.stats()``. It costs O(allocations + workers + replicas): an allocation's row is made
once, and where its chunks live is counted once and kept until one of its homes moves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from dgvm import transfer
from dgvm.dashboard.counters import Totals, latest, nest
from dgvm.protocol import messages

#: the only tier with chunks until memory tiering lands (``records.TIERS``)
DEVICE_TIER = "device"


@dataclass(frozen=True)
class Snapshot:
    time: float  # time.time() when it was taken
    allocations: list[dict]  # dgvm.table() rows + workers, by_worker, replicas, lost_chunks
    workers: list[dict]  # dgvm.workers() rows + home/replica bytes, device memory, load
    stats: dict  # {"workers": {address: {...}}, "allocations": {alloc_id: {...}}}
    totals: dict  # cluster counters that never go down (see counters.Totals)

    def allocation(self, alloc_id: int) -> dict | None:
        return next((a for a in self.allocations if a["alloc_id"] == alloc_id), None)


@dataclass
class Placed:
    """What the snapshot keeps of one allocation between snapshots."""

    row: dict  # its dgvm.table() row: fixed for the allocation's life
    key: tuple = ()  # (re-homes, migrations) when ``homes`` was counted
    homes: list = field(default_factory=list)  # (uid, bytes, chunks) per home worker
    by_worker: dict = field(default_factory=dict)  # address -> bytes homed there
    workers: list = field(default_factory=list)  # sorted addresses it spans


class Spread:
    """Per allocation: its ``dgvm.table()`` row, and the bytes and chunks homed on each
    worker, recounted only when a home moved (every move counts itself in the
    allocation's stats, the only place that rewrites homes)."""

    def __init__(self):
        self._placed: dict[int, Placed] = {}

    def get(self, gvat, alloc) -> Placed:
        p = self._placed.get(alloc.alloc_id)
        if p is None:  # the row dgvm.table() answers, made once
            p = self._placed[alloc.alloc_id] = Placed(gvat.info(alloc).to_dict())
        key = (alloc.stats["rehomes"], alloc.stats["migrated"])
        if p.key != key:
            uids, inverse = np.unique(alloc.homes, return_inverse=True)
            nbytes = np.bincount(inverse, weights=np.diff(alloc.offsets)).astype(np.int64)
            p.key = key
            p.homes = list(zip(uids.tolist(), nbytes.tolist(), np.bincount(inverse).tolist()))
            p.by_worker = {}
            for uid, b, _ in p.homes:  # a uid's address never changes
                a = gvat.inventory.by_uid[uid].address
                p.by_worker[a] = p.by_worker.get(a, 0) + b
            p.workers = sorted(p.by_worker)
        return p

    def keep_only(self, alloc_ids) -> None:
        for a in set(self._placed) - set(alloc_ids):
            del self._placed[a]


def _worker_row(row: dict, rec, m: dict) -> None:
    """Add to a ``dgvm.workers()`` row what the dashboard shows beside it; ``m`` is the
    worker's last heartbeat (``ChunkStorePlugin.metrics``)."""
    total, free = m.get("device_total"), m.get("device_free")
    row.update(
        host=rec.profile.host,
        tier=DEVICE_TIER,
        load=float(rec.load),
        home_bytes=0,
        replica_bytes=0,
        by_allocation={},
        by_owner={},
        device_total=total,
        device_free=free,
        # bytes of the whole device used by anything but dgvm's chunks (the worker's own
        # CUDA context included); other_used is its part inside dgvm's capacity
        device_other=(
            max(0, int(total) - int(free) - int(m.get("used", 0)))
            if total is not None and free is not None else row["other_used"]
        ),
    )


def build(plugin, spread: Spread, totals: Totals) -> Snapshot:
    """Take a snapshot of ``plugin``'s GVAT (a ``GVATPlugin`` that has started)."""
    gvat, scheduler = plugin.gvat, plugin.scheduler
    inv = gvat.inventory
    workers = plugin.workers()  # syncs the inventory from heartbeats, as dgvm.workers()
    live, per_worker, current = {}, {}, {}  # uid -> row; dgvm.stats() rows; counters
    for w in workers:
        rec = inv.by_address[w["address"]]
        ws = scheduler.workers.get(rec.address)
        m = (ws.metrics.get(messages.HEARTBEAT) if ws is not None else None) or {}
        _worker_row(w, rec, m)
        live[rec.uid] = w
        if "stats" in m:
            # a task's report is handled before its completion, a heartbeat up to 0.5 s
            # (more on a busy loop or a large cluster) after it
            reported = plugin.reported_stats(rec.address, rec.uid)
            stats = latest(m["stats"], reported) if reported else m["stats"]
            per_worker[rec.address] = {**stats, "replicas": m.get("replicas", 0)}
            current[(rec.address, rec.uid)] = stats

    allocations, alloc_stats = [], {}
    for alloc in gvat.allocations.values():
        p = spread.get(gvat, alloc)
        key, owner, lost = str(alloc.alloc_id), alloc.owner, 0
        for uid, b, c in p.homes:
            w = live.get(uid)
            if w is None:  # homed on a worker that left: the chunks are lost
                lost += c
                continue
            w["home_bytes"] += b
            w["by_allocation"][key] = b
            by_owner = w["by_owner"]
            by_owner[owner] = by_owner.get(owner, 0) + b
        nreplicas = 0
        for i, holders in alloc.replicas.items():
            nreplicas += len(holders)
            for uid in holders:
                w = live.get(uid)
                if w is not None:
                    w["replica_bytes"] += int(alloc.offsets[i + 1] - alloc.offsets[i])
        allocations.append({**p.row, "workers": p.workers, "by_worker": p.by_worker,
                            "replicas": nreplicas, "lost_chunks": lost})
        # the dgvm.stats() row, its counters copied as they are now
        alloc_stats[alloc.alloc_id] = {
            **alloc.stats, "paths": {k: dict(v) for k, v in alloc.stats["paths"].items()},
            "replicas": nreplicas,
        }
    spread.keep_only(gvat.allocations)
    return Snapshot(
        time=time.time(),
        allocations=allocations,
        workers=workers,
        stats={"workers": per_worker, "allocations": alloc_stats},
        totals=nest(totals.update(current), paths=transfer.NAMES),
    )
