"""Durable copies of chunks (``replicas=k``): where they live and what a worker's loss does.

Pure bookkeeping on the GVAT, like the table itself; the scheduler plugin does the I/O.
An allocation with ``copies = k`` keeps every chunk on its home and on ``k - 1`` other
workers (other hosts first), its *backups*. Unlike read replicas, which a write drops, a
backup is refreshed by every write before the write counts as done, so it always holds
the chunk's current version; it is never evicted. When a home leaves, a live backup of
each of its chunks becomes the home (``promotions``, then ``promoted``), and a new backup
is made elsewhere when room allows (``wanting``).
"""

from __future__ import annotations

import numpy as np
from dask.utils import format_bytes

from dgvm.gvat.inventory import WorkerRecord
from dgvm.protocol.errors import InvalidArgument, OutOfDeviceMemory

MAX_COPIES = 8


def check_count(copies: int, live: int) -> None:
    """``copies`` copies of each chunk need that many live workers."""
    if not 1 <= copies <= MAX_COPIES:
        raise InvalidArgument(f"replicas={copies}: between 1 and {MAX_COPIES} copies of each chunk")
    if copies > live:
        raise InvalidArgument(f"replicas={copies} keeps each chunk on {copies} workers; "
                              f"{live} live workers hold dgvm chunk stores")


def place(alloc, live: list[WorkerRecord], headroom: float, want: dict[int, int] | None = None
          ) -> dict[int, list]:
    """Choose backup holders: for each chunk ``i`` of ``alloc`` (``want``: i -> how many
    more copies; default ``alloc.copies - 1`` each), workers that hold no copy of it yet,
    on other hosts than those that do first, then most room first. Books their bytes on
    the records and in ``alloc.backups``; returns {uid: [chunk indices]} of the new
    backups. All or nothing: OutOfDeviceMemory, naming the room per worker, when some do
    not fit (nothing booked then)."""
    if want is None:
        want = {i: alloc.copies - 1 for i in range(alloc.nchunks)} if alloc.copies > 1 else {}
    by_uid = {r.uid: r for r in live}
    room = {r.uid: r.free - int(headroom * r.profile.capacity) for r in live}
    sizes = alloc.sizes()
    chosen: dict[int, list] = {}
    for i, n_more in want.items():
        have = {int(alloc.homes[i]), *alloc.backups.get(i, ()), *alloc.replicas.get(i, ())}
        hosts = {by_uid[u].profile.host for u in have if u in by_uid}
        n = int(sizes[i])
        for _ in range(n_more):
            fits = [r for r in live if r.uid not in have and room[r.uid] >= n]
            if not fits:
                free = ", ".join(f"{r.address}: {format_bytes(max(room[r.uid], 0))}" for r in live)
                raise OutOfDeviceMemory(
                    f"no room for copy {len(have) + 1} of chunk {i} of allocation {alloc.alloc_id} "
                    f"({format_bytes(n)}) on a worker without one; placeable per worker: {free}")
            r = max(fits, key=lambda r: (r.profile.host not in hosts, room[r.uid]))
            room[r.uid] -= n
            have.add(r.uid)
            hosts.add(r.profile.host)
            chosen.setdefault(r.uid, []).append(i)
    for uid, idx in chosen.items():
        book(alloc, by_uid[uid], idx, +1)
    return chosen


def book(alloc, rec: WorkerRecord, indices, sign: int) -> None:
    """Add (+1) or take off (-1) backups of ``indices`` on ``rec``, with their bytes."""
    for i in map(int, indices):
        if sign > 0 and rec.uid not in alloc.backups.get(i, ()):
            alloc.backups.setdefault(i, set()).add(rec.uid)
            rec.used += alloc.size(i)
        elif sign < 0 and forget(alloc, i, rec.uid):
            rec.used -= alloc.size(i)


def forget(alloc, index: int, uid: int) -> bool:
    """Chunk ``index`` no longer has a backup on worker ``uid`` (its bytes stay booked: the
    caller says what they are now); whether it had one."""
    held = alloc.backups.get(index)
    if held is None or uid not in held:
        return False
    held.discard(uid)
    if not held:
        del alloc.backups[index]
    return True


def unbook_all(alloc, inventory) -> None:
    """The allocation is freed: its backups' bytes come off their workers."""
    for i, held in alloc.backups.items():
        for uid in held:
            inventory.by_uid[uid].used -= alloc.size(i)
    alloc.backups.clear()


def live_holders(alloc, inventory, indices) -> dict[str, list[int]]:
    """{address: [chunk indices]} of the live backups of ``indices``."""
    out: dict[str, list[int]] = {}
    for i in indices:
        for uid in alloc.backups.get(int(i), ()):
            rec = inventory.by_uid[uid]
            if rec.alive:
                out.setdefault(rec.address, []).append(int(i))
    return out


def promotions(allocations, inventory, dead_uid: int) -> dict[str, dict[int, list[int]]]:
    """For the chunks homed on the worker ``dead_uid`` that have a live backup: {holder
    address: {alloc id: [chunk indices]}}, the holder the one with most room. The dead
    worker's backups come off the books."""
    plan: dict[str, dict[int, list[int]]] = {}
    for alloc in allocations:
        if not alloc.backups:
            continue
        for i in [i for i, held in alloc.backups.items() if dead_uid in held]:
            book(alloc, inventory.by_uid[dead_uid], [i], -1)
        for i in np.flatnonzero(alloc.homes == dead_uid).tolist():
            held = [inventory.by_uid[u] for u in alloc.backups.get(i, ())
                    if inventory.by_uid[u].alive and (i, u) not in alloc.filling]
            if held:
                best = max(held, key=lambda r: r.free)
                plan.setdefault(best.address, {}).setdefault(alloc.alloc_id, []).append(i)
    return plan


def promoted(alloc, index: int, rec: WorkerRecord, inventory) -> None:
    """The backup on ``rec`` is now chunk ``index``'s home (its old home left): its bytes
    stay booked on ``rec``, now as a home chunk's."""
    old = inventory.by_uid[int(alloc.homes[index])]
    old.used -= alloc.size(index)
    old.chunks -= 1
    forget(alloc, index, rec.uid)
    alloc.homes[index] = rec.uid
    rec.chunks += 1


def wanting(alloc, inventory) -> dict[int, int]:
    """Chunk index -> how many copies it lacks (its home lost none: only live homes)."""
    want = {}
    if alloc.copies <= 1:
        return want
    for i in range(alloc.nchunks):
        if not inventory.by_uid[int(alloc.homes[i])].alive:
            continue
        have = 1 + sum(inventory.by_uid[u].alive for u in alloc.backups.get(i, ()))
        if have < alloc.copies:
            want[i] = alloc.copies - have
    return want
