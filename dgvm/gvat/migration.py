"""Moving chunk homes: re-homing after remote reads, explicit moves, rebalancing.

Pure bookkeeping on the GVAT, like the table itself; the scheduler plugin does the I/O
(the new home pulls the chunk, then the old home releases it) around these steps:
``plan_move`` (what the new home must pull), ``set_home`` (the table after it did).
"""

from __future__ import annotations

import time

import numpy as np

from dgvm.gvat import copies
from dgvm.gvat.inventory import WorkerRecord
from dgvm.gvat.table import GVAT, Allocation
from dgvm.protocol.messages import PullChunk


def note_reads(alloc: Allocation, uid: int, home_used, remote, threshold: int) -> list[int]:
    """A launch on worker ``uid`` used chunks ``home_used`` at their home (here) and read
    chunks ``remote`` homed elsewhere. Return the chunks this worker has now read remotely
    ``threshold`` times while their home did not use them: they should move here."""
    for i in home_used:
        alloc.remote_reads.pop(int(i), None)
    if threshold <= 0:
        return []
    due = []
    for i in remote:
        i = int(i)
        if int(alloc.homes[i]) == uid:  # it moved here meanwhile
            continue
        counts = alloc.remote_reads.setdefault(i, {})
        counts[uid] = counts.get(uid, 0) + 1
        if counts[uid] >= threshold and i not in alloc.moving:
            due.append(i)
    return due


def plan_move(gvat: GVAT, alloc: Allocation, indices, target: WorkerRecord, choose_path) -> list[PullChunk]:
    """What ``target`` must pull to become the home of ``indices``: chunks not homed there
    already and not moving; each with its current home, the path ``choose_path(home
    profile, target profile)`` names, and version. Marks them as moving (``finish_move``
    clears the mark)."""
    plan = []
    for i in dict.fromkeys(int(i) for i in indices):
        home = gvat.inventory.by_uid[int(alloc.homes[i])]
        if home.uid == target.uid or i in alloc.moving or not home.alive:
            continue
        alloc.moving.add(i)
        plan.append(PullChunk(
            index=i,
            home=home.address,
            path=choose_path(home.profile, target.profile),
            version=int(alloc.versions[i]),
        ))
    return plan


def finish_move(alloc: Allocation, plan: list[PullChunk]) -> None:
    alloc.moving.difference_update(c.index for c in plan)


def set_home(gvat: GVAT, alloc: Allocation, indices, versions, target: WorkerRecord,
             reason: str) -> tuple[list[int], dict[str, list[int]]]:
    """``target`` now holds ``indices`` at ``versions``: make it their home. A chunk written
    meanwhile (its version moved on) keeps its home. Returns (the chunks whose home
    moved, {old home address: [chunks it must release]})."""
    moved, release = [], {}
    for i, v in zip(indices, versions):
        if int(alloc.versions[i]) != v:
            continue
        old = gvat.inventory.by_uid[int(alloc.homes[i])]
        n = alloc.size(i)
        old.used -= n
        old.chunks -= 1
        holders = alloc.replicas.get(i, set())
        if target.uid in holders:  # its replica became the home copy: bytes already booked
            holders.discard(target.uid)
            if not holders:
                alloc.replicas.pop(i, None)
        elif not copies.forget(alloc, i, target.uid):  # (a backup there: booked too; made again)
            target.used += n
        target.chunks += 1
        alloc.homes[i] = target.uid
        alloc.last_access[i] = time.time()
        alloc.remote_reads.pop(i, None)
        moved.append(i)
        if old.alive:
            release.setdefault(old.address, []).append(i)
    alloc.stats["rehomes" if reason == "rehome" else "migrated"] += len(moved)
    return moved, release


def replicas_dropped(gvat: GVAT, address: str, dropped: dict) -> None:
    """A worker dropped replicas on its own (evicted to make room): forget them."""
    rec = gvat.inventory.by_address.get(address)
    if rec is None:
        return
    for alloc_id, indices in dropped.items():
        alloc = gvat.allocations.get(int(alloc_id))
        if alloc is None:
            continue
        for i in indices:
            holders = alloc.replicas.get(int(i))
            if holders and rec.uid in holders:
                holders.discard(rec.uid)
                rec.used -= alloc.size(int(i))
                if not holders:
                    del alloc.replicas[int(i)]


def rebalance_plan(gvat: GVAT, allocs: list[Allocation]) -> list[tuple[Allocation, int, WorkerRecord]]:
    """Moves (allocation, chunk, new home) that even out device memory: each live worker
    towards the same used fraction of its capacity. Largest chunks move first; a move is
    made only if it brings both workers closer to their targets."""
    live = gvat.inventory.live()
    if len(live) < 2:
        return []
    used = {r.uid: r.used + r.other_used for r in live}
    cap = {r.uid: r.profile.capacity for r in live}
    frac = sum(used.values()) / sum(cap.values())
    excess = {u: used[u] - frac * cap[u] for u in used}  # > 0: above its share
    by_uid = {r.uid: r for r in live}
    free = {r.uid: r.free for r in live}
    candidates = []
    for a in allocs:
        sizes = a.sizes()
        for i in np.flatnonzero(np.isin(a.homes, list(by_uid))).tolist():
            if i not in a.moving:
                candidates.append((int(sizes[i]), a.alloc_id, i, a))
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    moves = []
    for n, _, i, a in candidates:
        src = int(a.homes[i])
        if excess[src] < n / 2:
            continue
        dst = min(excess, key=excess.get)
        if dst == src or -excess[dst] < n / 2 or free[dst] - n < gvat.headroom * cap[dst]:
            continue
        excess[src] -= n
        excess[dst] += n
        free[src] += n
        free[dst] -= n
        moves.append((a, i, by_uid[dst]))
    return moves
