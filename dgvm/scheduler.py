"""The scheduler side of dgvm: a SchedulerPlugin that keeps the GVAT.

Load it as a preload (``dask scheduler --preload dgvm.scheduler``) or let
``dgvm.LocalCluster`` / ``dgvm.connect`` install it. Its hooks are O(1); its handlers do
their bookkeeping synchronously (fast, in memory) and await workers for anything that
touches device memory, so the scheduler's event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np
from distributed import SchedulerPlugin

from dgvm import config, transfer
from dgvm.chunk_grid import block_nbytes
from dgvm.errors import OutOfDeviceMemory
from dgvm.gvat import GVAT
from dgvm.records import DeviceProfile

logger = logging.getLogger("dgvm.scheduler")

PLUGIN_NAME = "dgvm-gvat"


class GVATPlugin(SchedulerPlugin):
    """Owns the GVAT and serves it over the scheduler's comm."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self):
        self.gvat = GVAT(
            base=int(config.get("address-space.base")),
            size=int(config.get("address-space.size")),
            alignment=config.get_bytes("address-space.alignment"),
            headroom=float(config.get("placement.headroom")),
        )
        self.scheduler = None
        self._background: set[asyncio.Task] = set()

    # Handlers the scheduler serves; one visible place (a test checks they are installed).
    def handlers(self) -> dict:
        return {
            "dgvm_allocate": self.allocate,
            "dgvm_free": self.free,
            "dgvm_translate": self.translate,
            "dgvm_table": self.table,
            "dgvm_workers": self.workers,
            "dgvm_chunk_map": self.chunk_map,
            "dgvm_locate": self.locate,
            "dgvm_replica_added": self.replica_added,
            "dgvm_launched": self.launched,
            "dgvm_stats": self.stats,
        }

    async def start(self, scheduler):
        self.scheduler = scheduler
        scheduler.handlers.update(self.handlers())
        scheduler.extensions["dgvm"] = self
        for address in scheduler.workers:
            self.add_worker(scheduler, address)

    async def close(self):
        for t in self._background:
            t.cancel()

    # -- hooks (O(1)) --------------------------------------------------------------------
    def add_worker(self, scheduler, worker: str):
        self._sync_worker(worker)

    def remove_worker(self, scheduler, worker: str, **kwargs):
        rec = self.gvat.inventory.remove(worker)
        if rec is not None and rec.chunks:
            logger.warning("dgvm worker %s left holding %d chunks; they are marked lost", worker, rec.chunks)

    def remove_client(self, scheduler, client: str):
        # A client that goes away frees what it allocated, as a process exit frees its
        # memory. The work runs in the background: hooks stay O(1).
        if self.gvat.has_owner(client):
            task = asyncio.ensure_future(self._free_owned(client))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _free_owned(self, client: str):
        for alloc_id in self.gvat.owned_by(client):
            try:
                await self.free(alloc_id)
            except Exception:  # freed meanwhile by another request: nothing to do
                logger.debug("allocation %s of %s already gone", alloc_id, client)

    # -- inventory -----------------------------------------------------------------------
    def _sync_worker(self, address: str):
        ws = self.scheduler.workers.get(address) if self.scheduler else None
        m = ws.metrics.get("dgvm") if ws is not None else None
        if not m:
            return None
        rec = self.gvat.inventory.by_address.get(address)
        if rec is None or not rec.alive:
            rec = self.gvat.inventory.register(address, DeviceProfile.from_dict(m["profile"]))
        rec.other_used = int(m.get("other_used", 0))
        rec.load = float(getattr(ws, "occupancy", 0.0))
        return rec

    def _sync_inventory(self):
        """Pick up workers whose dgvm store started after they joined, and fresh figures
        from the last heartbeats. O(workers), run per allocation, never in a hook."""
        for address in self.scheduler.workers:
            self._sync_worker(address)

    # -- handlers ------------------------------------------------------------------------
    async def allocate(
        self,
        owner: str,
        nbytes: int | None = None,
        chunk_bytes: int | None = None,
        shape=None,
        dtype: str | None = None,
        chunks=None,
        placement: str = "balanced",
        colocate: int | None = None,
    ):
        """Reserve, place and create an allocation; all or nothing."""
        self._sync_inventory()
        if shape is not None:
            grid = tuple(tuple(int(b) for b in axis) for axis in chunks)
            sizes = block_nbytes(grid, np.dtype(dtype).itemsize)
        else:
            grid = None
            full, rest = divmod(int(nbytes), int(chunk_bytes))
            sizes = np.full(full + (rest > 0), int(chunk_bytes), dtype=np.int64)
            if rest:
                sizes[-1] = rest
        loads = {r.address: r.load for r in self.gvat.inventory.live()}
        alloc = self.gvat.allocate(
            owner, sizes, placement=placement, colocate=colocate,
            dtype=dtype, shape=shape, grid_chunks=grid, loads=loads,
        )
        per_worker = self.gvat.by_worker(alloc)
        results = await asyncio.gather(
            *(
                self.scheduler.rpc(addr).dgvm_store_allocate(
                    alloc_id=alloc.alloc_id, owner=owner, indices=idx,
                    sizes=sizes[idx].tolist(),
                )
                for addr, idx in per_worker.items()
            ),
            return_exceptions=True,
        )
        # The worker answers {"oom": message} for a full device (the scheduler's comms do
        # not deserialize exceptions, so expected failures travel as data).
        failed = [
            (a, r) for a, r in zip(per_worker, results)
            if isinstance(r, BaseException) or (isinstance(r, dict) and "oom" in r)
        ]
        if failed:
            ok = [a for a in per_worker if a not in dict(failed)]
            await self._free_on(alloc.alloc_id, ok)
            if alloc.alloc_id in self.gvat.allocations:  # unless freed meanwhile
                self.gvat.free(alloc.alloc_id)
            reasons = "; ".join(r["oom"] if isinstance(r, dict) else f"{a}: {r}" for a, r in failed)
            if all(isinstance(r, dict) for _, r in failed):
                raise OutOfDeviceMemory(
                    f"allocation of {alloc.nbytes} bytes rolled back on every worker: {reasons}"
                )
            raise failed[0][1]
        return self.gvat.chunk_map(alloc)

    async def _free_on(self, alloc_id: int, addresses):
        addresses = list(addresses)
        results = await asyncio.gather(
            *(self.scheduler.rpc(a).dgvm_store_free(alloc_id=alloc_id) for a in addresses),
            return_exceptions=True,
        )
        for a, r in zip(addresses, results):
            if isinstance(r, BaseException):  # the worker is gone or broken: say so
                logger.warning("freeing allocation %s on %s failed: %s", alloc_id, a, r)

    async def free(self, alloc_id: int, owner: str | None = None):
        alloc = self.gvat.get(alloc_id, owner)
        addresses = self.gvat.holders(alloc)
        self.gvat.free(alloc_id)
        await self._free_on(alloc_id, addresses)
        return alloc.nbytes

    # -- migration -----------------------------------------------------------------------
    def locate(self, alloc_id: int, index: int, worker: str):
        """Where a worker that misses a chunk fetches it from, and by which path."""
        alloc = self.gvat.get(alloc_id)
        home = self.gvat.inventory.by_uid[int(alloc.homes[index])]
        if not home.alive:
            return {"lost": home.address}
        me = self.gvat.inventory.by_address.get(worker)
        path = transfer.choose(home.profile, me.profile) if me is not None else "comm"
        return {"home": home.address, "path": path, "version": int(alloc.versions[index])}

    def replica_added(self, alloc_id: int, index: int, worker: str, nbytes: int,
                      path: str, seconds: float):
        return self.gvat.add_replica(alloc_id, index, worker, nbytes, path, seconds)

    async def launched(self, alloc_id: int, wrote: list, reads: dict):
        """A launch wrote ``wrote`` chunks of ``alloc_id`` and read others: count its
        hits and misses, bump versions, and drop every stale replica before answering,
        so that no later reader can see one."""
        for read_id, (hits, misses) in reads.items():
            self.gvat.count_reads(int(read_id), hits, misses)
        await self.invalidate(alloc_id, wrote)

    async def invalidate(self, alloc_id: int, indices):
        drop = self.gvat.wrote(alloc_id, indices)
        await asyncio.gather(*(
            self.scheduler.rpc(a).dgvm_drop_replicas(alloc_id=alloc_id, indices=idx)
            for a, idx in drop.items()
        ))

    async def stats(self):
        """Counters per worker (asked of the live stores) and per allocation."""
        live = [r.address for r in self.gvat.inventory.live()]
        answers = await asyncio.gather(
            *(self.scheduler.rpc(a).dgvm_store_info() for a in live), return_exceptions=True
        )
        workers = {
            a: {**m["stats"], "replicas": m["replicas"]}
            for a, m in zip(live, answers) if isinstance(m, dict)
        }
        allocations = {
            a.alloc_id: {**a.stats, "replicas": sum(len(h) for h in a.replicas.values())}
            for a in self.gvat.allocations.values()
        }
        return {"workers": workers, "allocations": allocations}

    def translate(self, vaddrs: list[int]):
        return self.gvat.translate_many(vaddrs)

    def chunk_map(self, alloc_id: int):
        return self.gvat.chunk_map(self.gvat.get(alloc_id))

    def table(self, alloc_id: int | None = None, chunks: bool = False):
        allocs = (
            [self.gvat.get(alloc_id)] if alloc_id is not None
            else list(self.gvat.allocations.values())
        )
        return [self.gvat.info(a, with_chunks=chunks).to_dict() for a in allocs]

    def workers(self, include_lost: bool = False):
        self._sync_inventory()
        inv = self.gvat.inventory
        recs = list(inv.by_uid.values()) if include_lost else inv.live()
        live = inv.live()
        bw = inv.effective_bandwidth(live)
        base = min(bw.values()) if bw else 1.0
        return [inv.info(r, bw.get(r.uid, 0.0) / base).to_dict() for r in recs]


def dask_setup(scheduler):
    """Preload entry point: ``dask scheduler --preload dgvm.scheduler``."""
    scheduler.add_plugin(GVATPlugin(), name=PLUGIN_NAME)
