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
        # dead worker uid -> {alloc id: (address that took over most of its chunks there, how many)}
        self._took_over: dict[int, dict[int, tuple[str, int]]] = {}
        self._lacking: set[int] = set()  # allocations with chunks short of copies (no room)

    # -- writes ------------------------------------------------------------------------
    async def refresh(self, alloc, by_holder: dict[str, list[int]], key: str | None = None,
                      fresh: bool = False) -> None:
        """The backups of chunks just written (by task ``key``), on each holder of
        ``by_holder``, copy them from their homes. The chunks of which some backup holds
        the write now remember ``key`` (``Allocation.last_writer``: a task run again after
        its worker left passes them over).
        A holder that fails loses those backups (made again later), unless the home left
        meanwhile: then a backup keeps the chunk as it was before the write if no other
        one got the write (the task runs again on it, ``Departures.rerun``), and is
        dropped if another did. ``fresh``: new backups, which hold nothing until copied
        (any failure drops them)."""
        inv = self.gvat.inventory

        def chunks_for(holder):
            out = []
            for i in by_holder[holder]:
                home = inv.by_uid[int(alloc.homes[i])]
                out.append([i, home.address, self.plugin.path(home, holder), int(alloc.versions[i])])
            return out

        holders = list(by_holder)
        # A new backup may go to a chunk's old home whose release of it is still on its
        # way there: the copy is made after that release (made before, it would be taken
        # for the home's own data and then released with it).
        results = await asyncio.gather(*(
            self.plugin._ask(h, messages.REFRESH, alloc_id=alloc.alloc_id, owner=alloc.owner,
                             chunks=chunks_for(h), new=fresh,
                             after_release=self.plugin.releases.last_sent(h) if fresh else None)
            for h in holders
        ), return_exceptions=True)
        landed = {i for h, r in zip(holders, results) if not isinstance(r, BaseException)
                  for i in by_holder[h]}
        if fresh and alloc.alloc_id not in self.gvat.allocations:
            # Freed while the new copies waited for releases: that free may have reached
            # their holders before them (allocation ids are never reused).
            for h, r in zip(holders, results):
                if not isinstance(r, BaseException):
                    self.plugin.spawn(self._tell(h, messages.STORE_FREE, alloc_id=alloc.alloc_id))
            return
        if key is not None and alloc.alloc_id in self.gvat.allocations:
            alloc.last_writer.update(dict.fromkeys(landed, key))
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
            self.plugin.spawn(self._tell(h, messages.DROP_REPLICAS, alloc_id=alloc.alloc_id, indices=stale))
            dropped = True
        if dropped:
            self.plugin.spawn(self.replenish([alloc.alloc_id]))

    async def _tell(self, holder, handler: str, **kwargs):
        """``handler`` on ``holder``, which frees memory there: best effort (a holder
        that left took its memory with it)."""
        try:
            await self.plugin._ask(holder, handler, **kwargs)
        except Exception as e:  # noqa: BLE001
            logger.info("dgvm: %s%s on %s: %s", handler, kwargs, holder, e)

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
                if len(r) > took.get(alloc_id, ("", 0))[1]:
                    took[alloc_id] = (addr, len(r))
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
        """Wait, at most ``PROMOTE_WAIT``, for the promotion of the chunks of the worker
        ``uid`` (which left). Past it the callers see the chunks as lost."""
        pending = self._promoting.get(uid)
        if pending is not None:
            try:
                await asyncio.wait_for(asyncio.shield(pending), PROMOTE_WAIT)
            except asyncio.TimeoutError:
                logger.warning("dgvm: copies took over the chunks of worker %s for %.0f s; "
                               "not waited for longer", uid, PROMOTE_WAIT)

    def written_by(self, key: str, named) -> list:
        """[alloc id, chunk index] of the chunks of allocations ``named`` whose backups got
        task ``key``'s write last."""
        out = []
        for alloc_id in named:
            alloc = self.gvat.allocations.get(int(alloc_id))
            if alloc is not None:
                out.extend([alloc.alloc_id, i] for i, k in alloc.last_writer.items() if k == key)
        return out

    def has_copies(self, named) -> bool:
        """Whether an allocation of ``named`` keeps copies (a task naming none is never run
        again: its lost chunks have no copy to run on)."""
        return any(a.copies > 1 for a in map(self.gvat.allocations.get, map(int, named)) if a is not None)

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
                addr, n = self._took_over.get(uid, {}).get(alloc.alloc_id, (None, 0))
                if addr is not None and addr in inv.by_address:
                    votes[addr] = votes.get(addr, 0) + n
        if votes:
            return max(votes, key=votes.get)
        live = inv.live()
        return min(live, key=lambda r: r.load).address if live else None

    async def settled(self, alloc, index: int) -> bool:
        """Wait for a promotion that may give chunk ``index`` (its home left) a new home;
        whether it has one now."""
        await self.settled_worker(int(alloc.homes[index]))
        return self.gvat.inventory.by_uid[int(alloc.homes[index])].alive

    async def settle(self, alloc=None) -> None:
        """Wait for the promotions in progress (of the workers that homed chunks of
        ``alloc``; all when None): a table or chunk map asked for meanwhile shows their end."""
        uids = list(self._promoting) if alloc is None else np.unique(alloc.homes).tolist()
        for uid in uids:
            await self.settled_worker(uid)

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
        await asyncio.gather(*(self._tell(a, messages.DROP_REPLICAS, alloc_id=alloc.alloc_id, indices=idx)
                               for a, idx in drop.items()))
