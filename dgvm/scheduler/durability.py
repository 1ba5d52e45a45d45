"""Durable copies (``replicas=k``) kept current, promoted when a home leaves, made again.

The GVAT's bookkeeping is ``dgvm.gvat.copies``; this part of the GVAT plugin does the I/O:

- after a write (a task's report, a ``put``), the backups of the chunks written copy them
  from their homes (``messages.REFRESH``) before the write counts as done: the report's
  handler, which holds the task's completion back, awaits it. A backup whose refresh
  fails is dropped from the books (and from its worker) and made again elsewhere.
- when a worker leaves, a live backup of each chunk homed there becomes its home
  (``messages.PROMOTE``; ``promote``, started by the plugin's ``remove_worker`` hook on
  the loop's next turn). Lookups of those chunks wait for it (``settled``) instead of
  answering ``ChunkLost``. Then chunks that lack copies get new backups where room
  allows (``replenish``), in the background.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from dgvm import transfer
from dgvm.gvat import copies
from dgvm.protocol import messages
from dgvm.protocol.errors import ChunkLost, OutOfDeviceMemory

logger = logging.getLogger("dgvm.scheduler")

PROMOTE_WAIT = 30.0  # seconds a lookup waits for the promotion of a lost home's chunks
REMEMBERED = 256  # workers that left whose chunks' new homes a task run again may ask


class Durability:
    """The I/O of durable copies (a part of the GVAT plugin)."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.gvat = plugin.gvat
        self._promoting: dict[int, asyncio.Future] = {}  # dead worker uid -> promotion done
        # dead worker uid -> {alloc id: address that took over its chunks there, most of them}
        self._took_over: dict[int, dict[int, str]] = {}
        self._lacking: set[int] = set()  # allocations with chunks short of copies (no room)

    # -- writes ------------------------------------------------------------------------
    async def refresh(self, alloc, by_holder: dict[str, list[int]], fresh: bool = False) -> set[int]:
        """The backups of chunks just written, on each holder of ``by_holder``, copy them
        from their homes. Returns the chunks of which some backup holds the write now.
        A holder that fails loses those backups (made again later), unless the home left
        meanwhile: then a backup keeps the chunk as it was before the write if no other
        one got the write (the task runs again on it, ``Departures.rerun``), and is
        dropped if another did. ``fresh``: new backups, which hold nothing until copied
        (any failure drops them)."""
        inv = self.gvat.inventory

        def chunks_for(holder):
            me = inv.by_address.get(holder)
            out = []
            for i in by_holder[holder]:
                home = inv.by_uid[int(alloc.homes[i])]
                path = transfer.choose(home.profile, me.profile) if me is not None else "comm"
                out.append([i, home.address, path, int(alloc.versions[i])])
            return out

        holders = list(by_holder)
        results = await asyncio.gather(*(
            self.plugin._ask(h, messages.REFRESH, alloc_id=alloc.alloc_id, owner=alloc.owner,
                             chunks=chunks_for(h), new=fresh)
            for h in holders
        ), return_exceptions=True)
        landed = {i for h, r in zip(holders, results) if not isinstance(r, BaseException)
                  for i in by_holder[h]}
        dropped = False
        for h, r in zip(holders, results):
            if not isinstance(r, BaseException) or alloc.alloc_id not in self.gvat.allocations:
                continue
            stale = (by_holder[h] if fresh or not isinstance(r, ChunkLost)
                     else [i for i in by_holder[h] if i in landed])
            rec = inv.by_address.get(h)
            if not stale or rec is None:
                continue
            logger.warning("dgvm: backups of chunks %s of allocation %s on %s were not refreshed "
                           "(%s); they are dropped and made again", stale, alloc.alloc_id, h, r)
            copies.book(alloc, rec, stale, -1)
            self.plugin.spawn(self._drop(h, alloc.alloc_id, stale))
            dropped = True
        if dropped:
            self.plugin.spawn(self.replenish([alloc.alloc_id]))
        return landed

    async def _drop(self, holder, alloc_id, indices):
        try:
            await self.plugin._ask(holder, messages.DROP_REPLICAS, alloc_id=alloc_id, indices=indices)
        except Exception as e:  # noqa: BLE001  (gone: its memory went with it)
            logger.info("dropping backups %s of allocation %s on %s: %s", indices, alloc_id, holder, e)

    # -- a worker left ---------------------------------------------------------------------
    def worker_left(self, uid: int) -> None:
        """The plugin's ``remove_worker`` hook (O(1)): promote on the loop's next turn."""
        done = asyncio.get_running_loop().create_future()
        self._promoting[uid] = done
        self.plugin.spawn(self.promote(uid, done))

    async def promote(self, uid: int, done: asyncio.Future) -> None:
        """Backups of the chunks homed on the worker ``uid`` (which left) become homes."""
        try:
            plan = copies.promotions(self.gvat.allocations.values(), self.gvat.inventory, uid)
            jobs = [(addr, alloc_id, idx) for addr, per in plan.items() for alloc_id, idx in per.items()]
            results = await asyncio.gather(*(
                self.plugin._ask(addr, messages.PROMOTE, alloc_id=alloc_id,
                                 owner=self.gvat.allocations[alloc_id].owner, indices=idx)
                for addr, alloc_id, idx in jobs
            ), return_exceptions=True)
            moved = []
            for (addr, alloc_id, idx), r in zip(jobs, results):
                alloc = self.gvat.allocations.get(alloc_id)
                rec = self.gvat.inventory.by_address.get(addr)
                if alloc is None or rec is None:
                    continue
                if isinstance(r, BaseException):
                    logger.warning("dgvm: promoting backups %s of allocation %s on %s failed: %s",
                                   idx, alloc_id, addr, r)
                    continue
                for i in r:
                    if int(alloc.homes[int(i)]) == uid:  # (not moved meanwhile)
                        copies.promoted(alloc, int(i), rec, self.gvat.inventory)
                moved.append(alloc_id)
                while len(self._took_over) > REMEMBERED:  # (oldest first)
                    self._took_over.pop(next(iter(self._took_over)))
                took = self._took_over.setdefault(uid, {})
                if len(r) > len(took.get(alloc_id, ("", []))[1]):
                    took[alloc_id] = (addr, list(r))
                self.plugin.scheduler.log_event(messages.MOVED_TOPIC, {
                    "alloc_id": alloc_id, "owner": alloc.owner, "indices": list(r),
                    "worker": addr, "reason": "promote",
                })
            if moved:
                logger.info("dgvm: backups became the homes of lost chunks of allocations %s", moved)
                self.plugin.spawn(self.replenish(moved))
        finally:
            done.set_result(None)
            self._promoting.pop(uid, None)

    async def settled_worker(self, uid: int) -> None:
        """Wait for the promotion of the chunks of the worker ``uid`` (which left)."""
        pending = self._promoting.get(uid)
        if pending is not None:
            await asyncio.wait_for(asyncio.shield(pending), PROMOTE_WAIT)

    def written_by(self, key: str, named) -> list:
        """[alloc id, chunk index] of the chunks of allocations ``named`` whose backups got
        task ``key``'s write last."""
        out = []
        for alloc_id in named:
            alloc = self.gvat.allocations.get(int(alloc_id))
            if alloc is not None:
                out.extend([alloc.alloc_id, i] for i, k in alloc.last_writer.items() if k == key)
        return out

    def rerun_target(self, uids, named) -> str | None:
        """Where a task pinned to the workers ``uids`` (which left), naming allocations
        ``named``, runs again: None if one of those lost a chunk; else the worker that
        took over most of their chunks there (the task forwards the rest to their homes)."""
        inv = self.gvat.inventory
        votes: dict[str, int] = {}
        for alloc_id in named:
            alloc = self.gvat.allocations.get(int(alloc_id))
            if alloc is None:
                return None
            if not all(inv.by_uid[u].alive for u in np.unique(alloc.homes).tolist()):
                return None  # a chunk without a copy: its data is lost
            for uid in uids:
                addr, idx = self._took_over.get(uid, {}).get(alloc.alloc_id, (None, ()))
                if addr is not None and addr in inv.by_address:
                    votes[addr] = votes.get(addr, 0) + len(idx)
        if votes:
            return max(votes, key=votes.get)
        live = inv.live()
        return min(live, key=lambda r: r.load).address if live else None

    async def settled(self, alloc, index: int) -> bool:
        """Wait for a promotion that may give chunk ``index`` (its home left) a new home;
        whether it has one now."""
        home = int(alloc.homes[index])
        pending = self._promoting.get(home)
        if pending is not None:
            await asyncio.wait_for(asyncio.shield(pending), PROMOTE_WAIT)
        return self.gvat.inventory.by_uid[int(alloc.homes[index])].alive

    async def settle(self) -> None:
        """Wait for every promotion in progress (a table asked for meanwhile shows its end)."""
        for pending in list(self._promoting.values()):
            await asyncio.wait_for(asyncio.shield(pending), PROMOTE_WAIT)

    async def settled_all(self, alloc) -> None:
        """Wait for the promotions that may give chunks of ``alloc`` whose home left a
        new home (a chunk map asked for meanwhile names them)."""
        inv = self.gvat.inventory
        for uid in np.unique(alloc.homes).tolist():
            pending = self._promoting.get(uid)
            if pending is not None and not inv.by_uid[uid].alive:
                await asyncio.wait_for(asyncio.shield(pending), PROMOTE_WAIT)

    # -- copies made again or added ---------------------------------------------------------
    def worker_joined(self) -> None:
        """The plugin's ``add_worker`` hook (O(1)): room, perhaps, for the copies that lack."""
        if self._lacking:
            self.plugin.spawn(self.replenish(sorted(self._lacking)))

    async def replenish(self, alloc_ids) -> None:
        """Give chunks of these allocations that lack copies new backups, where room
        allows (best effort: what does not fit waits for a worker to join)."""
        self.plugin._sync_inventory()  # (a worker whose store started after it joined)
        for alloc_id in alloc_ids:
            self._lacking.discard(alloc_id)
            alloc = self.gvat.allocations.get(alloc_id)
            if alloc is None:
                continue
            want = copies.wanting(alloc, self.gvat.inventory)
            if not want:
                continue
            try:
                await self.add(alloc, want)
            except Exception as e:  # noqa: BLE001
                logger.info("dgvm: new copies of allocation %s wait for room: %s", alloc_id, e)
            if alloc_id in self.gvat.allocations and copies.wanting(alloc, self.gvat.inventory):
                self._lacking.add(alloc_id)

    async def add(self, alloc, want: dict[int, int]) -> None:
        """Make new backups (``want``: chunk -> how many more): booked, then copied from
        the homes by their new holders; one that fails is taken off the books again."""
        chosen = copies.place(alloc, self.gvat.inventory.live(), self.gvat.headroom, want)
        inv = self.gvat.inventory
        filling = {(i, u) for u, idx in chosen.items() for i in idx}
        alloc.filling |= filling  # no data yet: never promoted
        try:
            await self.refresh(alloc, {inv.by_uid[u].address: idx for u, idx in chosen.items()}, fresh=True)
        finally:
            alloc.filling -= filling

    async def set_copies(self, alloc, k: int) -> None:
        """Keep ``k`` copies of every chunk of ``alloc`` from now on (``persist``). All or
        nothing: copies that cannot all be made are dropped again (OutOfDeviceMemory)."""
        copies.check_count(k, len(self.gvat.inventory.live()))
        old = alloc.copies
        alloc.copies = k
        if k < old:
            await self._trim(alloc, k)
            return
        want = copies.wanting(alloc, self.gvat.inventory)
        try:
            if want:
                await self.add(alloc, want)
            if copies.wanting(alloc, self.gvat.inventory):
                raise OutOfDeviceMemory(f"replicas={k} for allocation {alloc.alloc_id}: "
                                        "a new copy could not be made (see the scheduler's log)")
        except BaseException:
            alloc.copies = old
            await self._trim(alloc, old)
            raise

    async def _trim(self, alloc, k: int) -> None:
        """Drop backups beyond ``k - 1`` per chunk."""
        drop: dict[str, list[int]] = {}
        for i in list(alloc.backups):
            for uid in sorted(alloc.backups[i])[max(k - 1, 0):]:
                rec = self.gvat.inventory.by_uid[uid]
                copies.book(alloc, rec, [i], -1)
                if rec.alive:
                    drop.setdefault(rec.address, []).append(i)
        await asyncio.gather(*(self._drop(a, alloc.alloc_id, idx) for a, idx in drop.items()))
