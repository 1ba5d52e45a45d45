"""A scheduler that restarted rebuilds its GVAT from the workers' reports.

Dask keeps no state across a scheduler restart, but dgvm's workers outlive their scheduler
(``dask_compat.outlive_scheduler``) with their chunks, and register with the new one at the
same address. A worker that registers holding chunks another GVAT gave it (its heartbeat
metrics say so: every store names the GVAT, ``GVATPlugin.token``, that last gave it an
allocation) is asked what it holds (``messages.STORE_REPORT``), in the background: the
``add_worker`` hook only starts that. (One holding chunks this GVAT gave it is a worker
whose connection broke, and that came back after the scheduler took it for gone: it gives
them up, ``restore.leftovers``.) ``gvat.restore`` puts the allocations back. Requests that read or change
the table (allocate, free, chunk maps, lookups) wait meanwhile: until every report is in
and no worker registered for ``QUIET`` seconds, or for ``MISSING_WAIT`` seconds while an
allocation put back lacks chunks (workers come back seconds apart: Dask's connection
attempts back off). Then backups that are not current are
dropped, backups of chunks whose home did not come back become homes, chunks short of
copies get new ones, and allocations no worker told the meta of are freed. An allocation
whose owner does not come back within ``dgvm.scheduler-wait`` is freed too, as a client
that leaves frees its memory.
"""

from __future__ import annotations

import asyncio
import logging
import time

from dgvm import config
from dgvm.gvat import restore
from dgvm.protocol import messages

logger = logging.getLogger("dgvm.scheduler")

QUIET = 2.0  # seconds with no worker registering before the rebuild counts as done ...
MISSING_WAIT = 15.0  # ... or this many, while chunks of allocations put back are missing
REPORT_WAIT = 30.0  # seconds a worker's report may take (asked twice)
STEP = 20_000  # chunks merged between turns of the event loop (about 20 ms)


class Rebuild:
    """The plugin's part that rebuilds the GVAT after a restart (one per scheduler)."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.gvat = plugin.gvat
        self.restored: restore.Restored | None = None  # made at the first report with chunks
        self._done = asyncio.Event()
        self._done.set()
        self._born = time.monotonic()
        self._collecting = 0
        self._last_join = 0.0
        self._finisher: asyncio.Task | None = None
        # Reports are merged one at a time, and never while the end of a rebuild (its
        # promotions of backups above all) is in progress.
        self._lock = asyncio.Lock()
        self.owners: set[str] = set()  # the clients whose allocations the reports named

    def subscribe(self, client: str) -> None:
        """Give ``client``, the owner of allocations put back, dgvm's events: a client that
        reconnects does not subscribe again (Dask's ``Client`` subscribes once). Only
        owners: a client without handlers for a topic logs an error at each event. Its
        chunk maps are then stale (they are of the GVAT before the restart: a chunk no
        worker reported is lost, and a read of it must not wait for its dead worker)."""
        scheduler = self.plugin.scheduler
        if client in self.owners and client in scheduler.clients:
            for topic in (messages.LEFT_TOPIC, messages.MOVED_TOPIC):
                scheduler.subscribe_topic(topic, client)
            scheduler.log_event(messages.MOVED_TOPIC, {"owner": client, "all": True})

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def may_come_back(self, alloc_id) -> bool:
        """Is ``alloc_id`` an allocation of an earlier GVAT (its id below this one's
        first) not put back yet, asked for within ``MISSING_WAIT`` of this scheduler's
        start, while the workers holding it may still be on their way back: no worker
        registered yet, or one did holding chunks of an earlier GVAT?"""
        gvat = self.gvat
        return (isinstance(alloc_id, int) and 0 < alloc_id < gvat.first_id
                and alloc_id not in gvat.allocations and alloc_id not in gvat.not_restored
                and (self.restored is not None or not gvat.inventory.by_address)
                and time.monotonic() < self._born + MISSING_WAIT)

    async def come_back(self, alloc_id) -> None:
        """Wait while ``may_come_back(alloc_id)``, and for the rebuild that began meanwhile
        (at most ``MISSING_WAIT`` after the start, then the rebuild's own bound)."""
        while self.may_come_back(alloc_id):
            await asyncio.sleep(0.05)
            await self.settled()

    async def settled(self) -> None:
        """Wait until the rebuild in progress, if any, is done (always ends: ``QUIET``
        after the last registration, each report at most ``REPORT_WAIT``)."""
        if not self._done.is_set():
            await self._done.wait()

    # -- the add_worker hook (O(1)) ------------------------------------------------------
    def worker_joined(self, address: str, metrics: dict | None) -> None:
        """A worker registered; one that holds chunks or backups is asked for its report.
        One that this GVAT gave chunks to before is one whose connection broke and that
        came back: what it holds is given up (``restore.leftovers``)."""
        if not metrics or not (metrics.get("allocations") or metrics.get("replicas")):
            return
        if metrics.get("scheduler") == self.plugin.token:
            self.plugin.spawn(self._give_up_leftovers(address))
            return
        if self.restored is None:  # the first worker of a scheduler that restarted
            self.restored = restore.Restored(self.gvat)
        loop = asyncio.get_running_loop()
        self._done.clear()
        self._last_join = loop.time()
        self._collecting += 1
        self.plugin.spawn(self._collect(address))
        if self._finisher is None:
            self._finisher = asyncio.ensure_future(self._finish_when_quiet())
            self.plugin._background.add(self._finisher)

    async def _report(self, address: str) -> dict:
        """The store's report; asked again once if the first request fails (what a report
        never told stays in that store, unknown to the GVAT, until the worker leaves)."""
        try:
            return await asyncio.wait_for(
                self.plugin._ask(address, messages.STORE_REPORT, scheduler=self.plugin.token), REPORT_WAIT)
        except Exception as e:  # noqa: BLE001
            if address not in self.gvat.inventory.by_address:
                raise
            logger.info("dgvm: asking %s for its report again: %r", address, e)
            return await asyncio.wait_for(
                self.plugin._ask(address, messages.STORE_REPORT, scheduler=self.plugin.token), REPORT_WAIT)

    async def _collect(self, address: str) -> None:
        try:
            report = await self._report(address)
            async with self._lock:
                rec = self.gvat.inventory.by_address.get(address)
                if rec is None:
                    return  # it left meanwhile: what it held is gone
                acts = restore.Actions()
                merged = 0
                for entry in report.get("allocations") or ():
                    if ((entry.get("meta") or {}).get("scheduler") == self.plugin.token
                            and entry.get("alloc_id") in self.gvat.allocations
                            and entry.get("alloc_id") not in self.restored.ids):
                        continue  # ours (given to it since it registered; a report asked
                        # again names this GVAT for what the first, lost, answer told)
                    for part in restore.parts(entry, STEP):
                        self.restored.merge_one(rec, part, acts)
                        merged += len(part["homes"]) + len(part["backups"]) + 1
                        if merged >= STEP:  # (small steps: the loop serves others meanwhile)
                            merged = 0
                            await asyncio.sleep(0)
                self.gvat.resume_ids(int(report.get("max_alloc_id") or 0))
                self.restored.high = max(self.restored.high, int(report.get("max_vaddr_end") or 0))
                deferred = self.restored.take_deferred()
            if acts:
                await self._act(address, acts)
            for other, more in deferred.items():
                await self._act(other, more)
        except Exception as e:  # noqa: BLE001
            logger.warning("dgvm: the report of %s to the restarted scheduler failed: %r", address, e)
        finally:
            self._collecting -= 1

    async def _give_up_leftovers(self, address: str) -> None:
        try:
            report = await self._report(address)
            rec = self.gvat.inventory.by_address.get(address)
            if rec is not None:
                acts = restore.leftovers(self.gvat, rec, report)
                if acts:
                    logger.info("dgvm: %s came back holding chunks the GVAT took for lost: released",
                                address)
                    await self._act(address, acts)
        except Exception as e:  # noqa: BLE001
            logger.warning("dgvm: the chunks %s held when it came back were not released: %r", address, e)

    async def _finish_when_quiet(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                quiet = loop.time() - self._last_join
                if not self._collecting and quiet >= QUIET and (
                        quiet >= MISSING_WAIT or self.restored is None or not self.restored.missing.chunks):
                    break
                await asyncio.sleep(0.05)
            async with self._lock:
                await self._finish()
        finally:
            self._finisher = None
            self._done.set()

    async def _finish(self) -> None:
        r = self.restored
        if r is None:
            return
        r.retire()
        stale = r.stale_backups()
        # Bounded: everything that reads the table waits for this (``settled``).
        await asyncio.wait({asyncio.ensure_future(asyncio.gather(*(
            self.plugin._ask(addr, messages.DROP_REPLICAS, alloc_id=a, indices=idx)
            for addr, per in stale.items() for a, idx in per.items()
        ), return_exceptions=True))}, timeout=REPORT_WAIT)
        await asyncio.wait({asyncio.ensure_future(asyncio.gather(*(
            self.plugin._free_on(a, [addr]) for addr, ids in r.orphans_to_free().items() for a in ids
        ), return_exceptions=True))}, timeout=REPORT_WAIT)
        lost = r.lost()
        if any(self.gvat.allocations[a].backups for a in lost):
            self.plugin.durability.worker_left(r.missing.uid)  # their backups become homes
            await self.plugin.durability.settled_worker(r.missing.uid)
            lost = r.lost()
        with_copies = [a for a in r.ids if a in self.gvat.allocations and self.gvat.allocations[a].copies > 1]
        if with_copies:
            self.plugin.spawn(self.plugin.durability.replenish(with_copies))
        logger.info("dgvm: the GVAT was rebuilt from the workers' reports: %d allocations, %d "
                    "chunks and backups%s", len(r.ids), r.chunks,
                    f"; chunks no worker holds (lost): {dict(list(lost.items())[:8])}" if lost else "")
        owners = {self.gvat.allocations[a].owner for a in r.ids if a in self.gvat.allocations}
        self.owners |= owners
        for owner in owners:  # (those connected already; the others as they come: add_client)
            self.subscribe(owner)
        self.plugin.spawn(self._free_if_owner_gone(owners))

    async def _act(self, address: str, acts: restore.Actions) -> None:
        """Do on the worker at ``address`` what its report needs (``restore.Actions``)."""
        stream = self.plugin.scheduler.stream_comms.get(address)
        for a, idx in acts.release.items():
            self.plugin.releases.send(stream, address, a, idx)
        jobs = [self.plugin._ask(address, messages.DROP_REPLICAS, alloc_id=a, indices=idx)
                for a, idx in acts.drop.items()]
        jobs += [self.plugin._free_on(a, [address]) for a in acts.free]
        if jobs:
            # Bounded, as ``_finish``'s: the rebuild is settled only once every report's
            # actions are done, and a task on that worker may hold its store (which the
            # drop needs) while it waits for the settled GVAT (``LOCATE``). Past the bound
            # they go on, and the rebuild settles without them.
            _, running = await asyncio.wait({asyncio.ensure_future(asyncio.gather(*jobs, return_exceptions=True))},
                                            timeout=REPORT_WAIT)
            if running:
                logger.warning("dgvm: the drops and frees the report of %s asked for took over %g s: "
                               "the rebuild goes on without them", address, REPORT_WAIT)

    async def _free_if_owner_gone(self, owners: set) -> None:
        """Free what was put back of owners that did not reconnect within
        ``dgvm.scheduler-wait`` (the ``remove_client`` hook never runs for them)."""
        await asyncio.sleep(config.get_seconds("scheduler-wait"))
        for owner in owners:
            if owner not in self.plugin.scheduler.clients and self.gvat.has_owner(owner):
                logger.info("dgvm: client %s did not come back after the scheduler restarted: "
                            "its allocations are freed", owner)
                await self.plugin._free_owned(owner)
