"""The scheduler side of dgvm: a SchedulerPlugin that keeps the GVAT.

Load it as a preload (``dask scheduler --preload dgvm.scheduler``) or let
``dgvm.LocalCluster`` / ``dgvm.connect`` install it. Its hooks are O(1); its handlers do
their bookkeeping synchronously (fast, in memory) and await workers for anything that
touches device memory, so the scheduler's event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import math
import time
import uuid

import numpy as np
from distributed import SchedulerPlugin

from dgvm import config, dashboard, dask_compat, streams, transfer
from dgvm.dashboard.counters import latest
from dgvm.gvat import GVAT, copies, migration
from dgvm.gvat.placement import POLICIES
from dgvm.protocol import arguments, messages
from dgvm.protocol.chunk_grid import block_nbytes
from dgvm.protocol.errors import (
    ChunkLost, DgvmError, InvalidAddress, InvalidArgument, OutOfDeviceMemory, PeerClosing,
    broken_connection,
)
from dgvm.protocol.messages import ChunkMap, Migrated, Pulled, Translation, Where
from dgvm.protocol.records import AllocationMeta, AllocId, ClientId, DeviceProfile, WorkerAddress
from dgvm.scheduler.departures import Departures
from dgvm.scheduler.durability import Durability
from dgvm.scheduler.rebuild import Rebuild
from dgvm.scheduler.releases import PendingReleases

logger = logging.getLogger("dgvm.scheduler")

PLUGIN_NAME = messages.GVAT_PLUGIN
PLACE_RETRIES = 3  # placements of one allocation tried again after a worker died during one
LEFT_WAIT = 5.0  # seconds to wait for the removal of a worker whose connection broke
MIGRATE_TRIES = 3  # moves of a chunk that a write overtook, per migrate request
# Handlers that read or change the allocations wait for a rebuild of the GVAT in progress
# (a scheduler that restarted: ``scheduler.rebuild``).
AFTER_REBUILD = frozenset({
    messages.ALLOCATE, messages.FREE, messages.FREE_ALL, messages.TRANSLATE, messages.TABLE,
    messages.CHUNK_MAP, messages.LOCATE, messages.MIGRATE, messages.REBALANCE,
    messages.SET_REPLICAS, messages.STATS, messages.LAUNCHED,
})
# Requests that make chunks or backups on a worker carry the allocation's meta, which the
# worker keeps for a scheduler that restarts (a refresh only when it makes a new backup).
CARRY_META = frozenset({messages.STORE_ALLOCATE, messages.PULL, messages.PROMOTE, messages.REFRESH})


def measured_load(scheduler, ws) -> float:
    """Seconds of work queued on Dask's worker ``ws``, as far as Dask has measured it: its
    tasks at Dask's own estimate for their kind, except a kind Dask has never timed, which
    its occupancy counts as ``unknown-task-duration`` (0.5 s a task): a worker still
    running its first 2 ms dgvm task would look busy for half a second and lose most of a
    new allocation to its peers, which every later operation on it then pays. (Occupancy
    also adds the bytes its tasks still have to fetch; dgvm's tasks fetch nothing through
    Dask.) O(task kinds queued on the worker)."""
    total = 0.0
    for name, count in dask_compat.queued_prefixes(ws).items():
        seconds = dask_compat.prefix_duration(scheduler, name)
        if seconds is not None:
            total += seconds * count
    return total


class GVATPlugin(SchedulerPlugin):
    """Owns the GVAT and serves it over the scheduler's comm: the scheduler's state of
    dgvm, one per scheduler."""

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
        self.releases = PendingReleases()  # old homes giving up moved chunks
        self.departures = Departures(self.gvat)  # workers that left, tasks stranded there
        self.durability = Durability(self)  # backups kept current, promoted, made again
        self.departures.durability = self.durability
        self.rebuild = Rebuild(self)  # the GVAT from the workers' reports, after a restart
        self.token = uuid.uuid4().hex  # names this GVAT in what workers keep (AllocationMeta)
        # Moves are numbered for the clients (``Migrated.moves``), increasing also past a
        # restart of the scheduler, whose new GVAT starts later.
        self._move_numbers = itertools.count(time.time_ns())
        # address -> (uid, its store's counters as its launch reports told them, the
        # largest of each): newer than its last heartbeat's once a task reported since
        self._reported: dict[str, tuple[int, dict]] = {}

    # Handlers the scheduler serves (messages.SCHEDULER_HANDLERS; a test checks both).
    def handlers(self) -> dict:
        table = {
            messages.ALLOCATE: self.allocate,
            messages.FREE: self.free,
            messages.FREE_ALL: self.free_all,
            messages.TRANSLATE: self.translate,
            messages.TABLE: self.table,
            messages.WORKERS: self.workers,
            messages.CHUNK_MAP: self.chunk_map,
            messages.LOCATE: self.locate,
            messages.REPLICA_ADDED: self.replica_added,
            messages.LAUNCHED: self.launched,
            messages.STATS: self.stats,
            messages.MIGRATE: self.migrate,
            messages.REBALANCE: self.rebalance,
            messages.REPLICAS_DROPPED: self.replicas_dropped,
            messages.RELEASES_SENT: self.releases_sent,
            messages.SET_REPLICAS: self.set_replicas,
            messages.CONTEXT_LOST: self.departures.context_lost,
            messages.STRANDED: self.departures.stranded,
        }
        return {name: self._after_rebuild(fn) if name in AFTER_REBUILD else fn for name, fn in table.items()}

    def _after_rebuild(self, fn):
        """``fn``, answered once a rebuild of the GVAT in progress is done."""
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def handler(*args, **kwargs):
            if not self.rebuild.active and not self.rebuild.may_come_back(kwargs.get("alloc_id")):
                return fn(*args, **kwargs)
            signature.bind(*args, **kwargs)  # (a bad call is refused at once: messages.served)
            return self._when_rebuilt(fn, args, kwargs)

        return handler

    async def _when_rebuilt(self, fn, args, kwargs):
        await self.rebuild.settled()
        await self.rebuild.come_back(kwargs.get("alloc_id"))
        result = fn(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def start(self, scheduler):
        self.scheduler = scheduler
        self.departures.scheduler = scheduler
        # Refusals (an allocation gone, a device full, ...) are answered as data: they
        # happen in running programs (a task or a release outlives its array, arrays are
        # released while their cluster closes), and Dask would log each as a failure.
        scheduler.handlers.update(messages.serve(self.handlers()))
        scheduler.stream_handlers[messages.REPORT] = self._launched_stream
        scheduler.extensions[messages.EXTENSION] = self
        # A task's result stays where it ran: lost elsewhere, Dask would run the task again
        # or leave its future waiting for ever (dask_compat.ReduceReplicasKeepingPinned).
        dask_compat.keep_pinned_results(scheduler, messages.TASK_PREFIX)
        for address in scheduler.workers:
            self.add_worker(scheduler, address)
        for stream in scheduler.client_comms.values():  # workers: by add_worker above
            streams.tune(stream)
        dashboard.install(scheduler, self)  # pages, JSON API, Prometheus (dgvm/dashboard)

    async def close(self):
        for t in self._background:
            t.cancel()

    # -- hooks (O(1)) --------------------------------------------------------------------
    def add_worker(self, scheduler, worker: str):
        self._sync_worker(worker)
        streams.tune(scheduler.stream_comms.get(worker))
        self.durability.worker_joined()
        ws = scheduler.workers.get(worker)
        # One that holds chunks (its scheduler restarted) reports them, in the background.
        self.rebuild.worker_joined(worker, ws.metrics.get(messages.HEARTBEAT) if ws is not None else None)

    def transition(self, key, start, finish, *args, **kwargs):
        # Every transition of every task: O(1) (``Departures.note``).
        self.departures.note(key, start, finish)

    def add_client(self, scheduler, client: str):
        # Dask makes the stream to a client after this hook, before it next yields to
        # the loop: tuned on the loop's next turn.
        scheduler.loop.add_callback(lambda: streams.tune(scheduler.client_comms.get(client)))
        self.rebuild.subscribe(client)  # (an owner of allocations a rebuild put back)

    def remove_worker(self, scheduler, worker: str, **kwargs):
        rec = self.gvat.inventory.remove(worker)
        self._reported.pop(worker, None)
        arena = self.departures.arenas.get(worker)  # (``left`` forgets it)
        if rec is not None and rec.chunks:
            logger.warning("dgvm worker %s left holding %d chunks; those with no copy elsewhere "
                           "(replicas) are lost", worker, rec.chunks)
        self.releases.worker_left(worker)
        # Clients hear of it, its arena goes; its stranded tasks fail (``transition``).
        self.departures.left(worker, rec.uid if rec is not None else None)
        if rec is not None:
            self.durability.worker_left(rec.uid)  # backups of its chunks become homes
        # Peers stop waiting on it to forget their buffers (ipc_retire); on the loop's next
        # turn, as telling every worker is O(workers).
        scheduler.loop.add_callback(self._tell_peer_left, worker, arena)

    def _tell_peer_left(self, worker: str, arena: str | None):
        # dgvm workers only: an unknown stream message closes a plain Dask worker. The one
        # that left is out of the inventory already.
        for rec in self.gvat.inventory.live():
            streams.tell(self.scheduler.stream_comms.get(rec.address), messages.peer_left(worker, arena))

    def remove_client(self, scheduler, client: str):
        # A client that goes away frees what it allocated, as a process exit frees its
        # memory. The work runs in the background: hooks stay O(1).
        if self.gvat.has_owner(client):
            self.spawn(self._free_owned(client))

    def spawn(self, coro) -> None:
        """Run ``coro`` in the background of the scheduler's loop (cancelled at close)."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def free_all(self):
        """Free every allocation (a local cluster closing: before its workers go, so no
        chunk is reported lost and no store is asked after it closed). Answers the count."""
        return await self._free_many(list(self.gvat.allocations))

    async def _free_owned(self, client: str) -> int:
        return await self._free_many(self.gvat.owned_by(client))  # O(owned): not in the hook

    async def _free_many(self, alloc_ids: list) -> int:
        async def free_one(alloc_id):
            try:
                await self.free(alloc_id)
            except Exception:  # freed meanwhile by another request: nothing to do
                logger.debug("allocation %s already gone", alloc_id)

        await asyncio.gather(*(free_one(a) for a in alloc_ids))
        return len(alloc_ids)

    def _report_stats(self, worker: str, stats: dict):
        rec = self.gvat.inventory.by_address.get(worker)
        if rec is None:
            return
        uid, before = self._reported.get(worker, (None, None))
        # tasks in several threads may hand their reports over out of order
        self._reported[worker] = (rec.uid, latest(before, stats) if uid == rec.uid else stats)

    def reported_stats(self, address: str, uid: int) -> dict | None:
        """The counters of the store at ``address`` (registered as ``uid``) as its launch
        reports told them; None if none reported."""
        kept = self._reported.get(address)
        return kept[1] if kept is not None and kept[0] == uid else None

    # -- inventory -----------------------------------------------------------------------
    def _sync_worker(self, address: str):
        ws = self.scheduler.workers.get(address) if self.scheduler else None
        m = ws.metrics.get(messages.HEARTBEAT) if ws is not None else None
        if not m:
            return None
        rec = self.gvat.inventory.by_address.get(address)
        if rec is None or not rec.alive:
            rec = self.gvat.inventory.register(address, DeviceProfile.from_dict(m["profile"]))
        rec.other_used = int(m.get("other_used", 0))
        if m.get("arena"):
            self.departures.arenas[address] = m["arena"]
        rec.load = measured_load(self.scheduler, ws)
        return rec

    def _sync_inventory(self):
        """Pick up workers whose dgvm store started after they joined, and fresh figures
        from the last heartbeats. O(workers), run per allocation, never in a hook."""
        for address in self.scheduler.workers:
            self._sync_worker(address)

    async def _ask(self, worker: WorkerAddress, handler: str, grace: float | None = None, **kwargs):
        """Call ``handler`` on ``worker``'s chunk store; its answer decoded
        (``messages.call``: a refusal raised). A worker that leaves meanwhile raises
        ``ConnectionError`` (an OSError, as a broken connection does) once it is removed;
        one closing (its store gone, so Dask answers None for the handler) ``PeerClosing``,
        after up to ``grace`` seconds of waiting for news that it left
        (``LeftPeers.call``)."""
        if handler in CARRY_META and "meta" not in kwargs and (handler != messages.REFRESH or kwargs.get("new")):
            alloc = self.gvat.allocations.get(kwargs.get("alloc_id"))
            if alloc is not None:
                kwargs["meta"] = meta(alloc, self.token).to_dict()
        if worker not in self.scheduler.workers:
            # Removed already, so its departure will not stop the request: Dask would try
            # to connect for its whole connect timeout (30 s), holding up whatever awaits
            # this (a write's report holds its worker's stream). (Checked in the same step
            # as ``peers.call`` notes the request: a removal after it stops it.)
            raise ConnectionError(f"worker {worker} left the cluster")
        return await self.departures.peers.call(
            worker, messages.call(self.scheduler.rpc(worker), handler, required=True, **kwargs),
            lambda: ConnectionError(f"worker {worker} left the cluster"), grace=grace)

    # -- handlers ------------------------------------------------------------------------
    @staticmethod
    def _check_chunk_count(nbytes, chunk_bytes, chunks) -> None:
        """Refuse an allocation of more chunks than ``dgvm.max-chunks`` before building
        anything for it (a table of millions of chunks takes seconds to place)."""
        limit = int(config.get("max-chunks"))
        if chunks is not None:
            n = int(np.prod([len(axis) for axis in chunks], dtype=object))
        else:
            n = -(-int(nbytes) // max(int(chunk_bytes), 1))
        if n > limit:
            raise InvalidAddress(
                f"an allocation of {n} chunks was asked; at most {limit} are allowed "
                "(dgvm.max-chunks): use larger chunks"
            )

    async def allocate(
        self,
        owner: ClientId,
        nbytes: int | None = None,
        chunk_bytes: int | None = None,
        shape=None,
        dtype: str | None = None,
        chunks=None,
        placement: str = "balanced",
        colocate: int | None = None,
        zero: bool = True,
        replicas: int = 1,
    ) -> ChunkMap:
        """Reserve, place and create an allocation; all or nothing. ``zero=False``: the
        chunks are not zero-filled (the caller's next task writes all of them). Placed again
        on the workers left if one dies meanwhile. ``replicas``: copies kept of each chunk
        (``dgvm.gvat.copies``)."""
        owner = arguments.text("owner", owner)
        arguments.flag("zero", zero)
        replicas = arguments.integer("replicas", replicas, 1)
        placement = arguments.text("placement", placement, POLICIES)
        colocate = _colocate(colocate)
        if shape is not None:
            shape = arguments.integers("shape", shape, 1)  # an array of no elements is never placed
            dtype = arguments.dtype_name("dtype", dtype)
            if math.prod(shape) * np.dtype(dtype).itemsize > arguments.INT64_MAX:
                raise InvalidArgument(f"shape {shape} of {dtype} holds more than 2**63 bytes")
            chunks = arguments.sequence("chunks", chunks)
            if len(chunks) != len(shape):
                raise InvalidArgument(f"chunks has {len(chunks)} axes, shape {shape} has {len(shape)}")
            self._check_chunk_count(None, None, [arguments.sequence(f"chunks[{k}]", c) for k, c in enumerate(chunks)])
            chunks = arguments.grid("chunks", chunks, shape)
        else:
            nbytes = arguments.integer("nbytes", nbytes, 1)
            chunk_bytes = arguments.integer("chunk_bytes", chunk_bytes, 1)
        self._check_chunk_count(nbytes, chunk_bytes, chunks)
        for attempt in range(PLACE_RETRIES):
            try:
                return await self._place(owner, nbytes, chunk_bytes, shape, dtype, chunks, placement,
                                         colocate, zero, replicas)
            except _WorkersLeft as e:
                if attempt == PLACE_RETRIES - 1:
                    raise DgvmError(str(e)) from None

    async def _place(self, owner, nbytes, chunk_bytes, shape, dtype, chunks, placement, colocate,
                     zero, replicas=1) -> ChunkMap:
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
            dtype=dtype, shape=shape, grid_chunks=grid, loads=loads, copies=replicas,
        )
        per_worker = self.gvat.by_worker(alloc)
        backups = copies.live_holders(alloc, self.gvat.inventory, range(alloc.nchunks))
        per_worker.update({a: per_worker.get(a, []) for a in backups})
        results = await asyncio.gather(
            *(
                self._ask(
                    addr, messages.STORE_ALLOCATE, alloc_id=alloc.alloc_id, owner=owner,
                    indices=idx, sizes=sizes[idx].tolist(), zero=zero,
                    # the GVAT counted the memory of releases sent there free already
                    after_release=self.releases.last_sent(addr),
                    backups=backups.get(addr, []), backup_sizes=sizes[backups.get(addr, [])].tolist(),
                )
                for addr, idx in per_worker.items()
            ),
            return_exceptions=True,
        )
        # A full device is refused as OutOfDeviceMemory (messages.REFUSALS).
        failed = [(a, r) for a, r in zip(per_worker, results) if isinstance(r, BaseException)]
        if failed:
            ok = [a for a in per_worker if a not in dict(failed)]
            await self._free_on(alloc.alloc_id, ok)
            if alloc.alloc_id in self.gvat.allocations:  # unless freed meanwhile
                self.gvat.free(alloc.alloc_id)
            reasons = "; ".join(
                str(r) if isinstance(r, OutOfDeviceMemory) else f"{a}: {r}" for a, r in failed
            )
            if all(isinstance(r, OutOfDeviceMemory) for _, r in failed):
                raise OutOfDeviceMemory(
                    f"allocation of {alloc.nbytes} bytes rolled back on every worker: {reasons}"
                )
            broken = [a for a, r in failed if broken_connection(r)]
            if broken:
                # A worker died or closed while its chunks were made: once the scheduler has
                # removed it, place again on the others. (An OSError raised out of a handler
                # would make Dask close the caller's connection, as if the caller had gone.)
                if await self._removed(broken, LEFT_WAIT):
                    raise _WorkersLeft(f"allocation of {alloc.nbytes} bytes: workers left while "
                                       f"it was placed: {reasons}")
                raise DgvmError(f"allocation of {alloc.nbytes} bytes rolled back: {reasons}")
            raise failed[0][1]
        return self.gvat.chunk_map(alloc)

    async def _removed(self, addresses, timeout: float) -> bool:
        """Whether the scheduler removes the workers at ``addresses`` within ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while any(a in self.gvat.inventory.by_address for a in addresses):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def _free_on(self, alloc_id: AllocId, addresses):
        addresses = list(addresses)
        results = await asyncio.gather(
            *(self._ask(a, messages.STORE_FREE, alloc_id=alloc_id) for a in addresses),
            return_exceptions=True,
        )
        for a, r in zip(addresses, results):
            if isinstance(r, BaseException):  # the worker is gone or broken: say so
                logger.warning("freeing allocation %s on %s failed: %s", alloc_id, a, r)

    async def free(self, alloc_id: AllocId, owner: ClientId | None = None) -> int:
        alloc = self.gvat.get(arguments.integer("alloc_id", alloc_id), arguments.maybe_text("owner", owner))
        # Old homes too: a release still on its way there frees nothing once this has.
        live = self.gvat.inventory.by_address
        old = {a for a in self.releases.old_homes(alloc_id) if a in live}
        addresses = self.gvat.holders(alloc) | old
        self.gvat.free(alloc_id)
        await self._free_on(alloc_id, addresses)
        return alloc.nbytes

    # -- migration -----------------------------------------------------------------------
    async def locate(self, alloc_id: AllocId, index: int, worker: WorkerAddress) -> Where:
        """Where a worker that misses a chunk fetches it from, and by which path."""
        alloc = self.gvat.get(arguments.integer("alloc_id", alloc_id))
        index = arguments.integer("index", index, 0, alloc.nchunks - 1)
        worker = arguments.text("worker", worker)
        home = self.gvat.inventory.by_uid[int(alloc.homes[index])]
        if not home.alive and await self.durability.settled(alloc, index):  # a backup took over
            home = self.gvat.inventory.by_uid[int(alloc.homes[index])]
        if not home.alive:
            raise ChunkLost(f"chunks [{index}] of allocation {alloc_id} were on worker {home.address}, "
                            "which left the cluster")
        return Where(home.address, self.path(home, worker), int(alloc.versions[index]))

    def path(self, home, worker: WorkerAddress) -> str:
        """The transfer path from ``home`` (a record) to the worker at ``worker``."""
        me = self.gvat.inventory.by_address.get(worker)
        return transfer.choose(home.profile, me.profile) if me is not None else "comm"

    def replica_added(self, alloc_id: AllocId, index: int, worker: WorkerAddress, nbytes: int,
                      path: str, seconds: float, source: WorkerAddress, version: int) -> str:
        alloc_id, index = arguments.integer("alloc_id", alloc_id), arguments.integer("index", index)
        self._check_indices("index", alloc_id, [index])
        worker, source = arguments.text("worker", worker), arguments.text("source", source)
        nbytes, version = arguments.integer("nbytes", nbytes), arguments.integer("version", version)
        path, seconds = arguments.text("path", path, transfer.NAMES), arguments.number("seconds", seconds)
        return self.gvat.add_replica(alloc_id, index, worker, nbytes, path, seconds, source, version)

    async def launched(self, alloc_id: AllocId, wrote: list, reads: dict, worker: WorkerAddress | None = None,
                       key: str | None = None, stats: dict | None = None):
        """A launch on ``worker`` wrote ``wrote`` chunks of ``alloc_id`` and read others
        (``reads``: alloc id -> hits, misses, chunks used at home, chunks read remotely):
        count, bump versions, drop every stale replica before answering (no later reader
        can see one), and move the home of chunks read remotely often enough here.
        ``stats``: the worker's store counters as of then (``reported_stats``)."""
        if stats is not None and worker is not None:
            self._report_stats(arguments.text("worker", worker), arguments.mapping("stats", stats))
        alloc_id = arguments.integer("alloc_id", alloc_id)
        wrote = self._check_indices("wrote", alloc_id, arguments.integers("wrote", wrote))
        reads = self._check_reads(arguments.mapping("reads", reads))
        worker = arguments.maybe_text("worker", worker)
        await self.invalidate(alloc_id, wrote, arguments.maybe_text("key", key))
        rec = self.gvat.inventory.by_address.get(worker) if worker else None
        threshold = int(config.get("migration.rehome-after"))
        for read_id, r in reads.items():
            self.gvat.count_reads(read_id, r["hits"], r["misses"])
            alloc = self.gvat.allocations.get(read_id)
            # Never move chunks of the array this launch writes: its other tasks may be
            # writing them now.
            if alloc is None or rec is None or read_id == alloc_id:
                continue
            due = migration.note_reads(alloc, rec.uid, r["home"], r["remote"], threshold)
            if due:
                try:
                    await self.move(alloc, due, rec, reason="rehome")
                except Exception as e:  # best effort: the chunk stays where it is
                    logger.info("re-homing chunks %s of allocation %s to %s failed: %s",
                                due, read_id, worker, e)

    async def _launched_stream(self, worker: WorkerAddress, alloc_id: AllocId, wrote: list, reads: dict,
                               stats: dict | None = None, key: str | None = None):
        """``launched``, told on the worker's batched stream (``dgvm.worker.tasks.report``).
        Dask awaits a stream handler before the next message of that stream, so this is
        done before the task's completion is handled; so are the store's counters the
        report carries (``stats``: ``reported_stats``). It must not raise: an error in a
        stream handler ends the worker's stream."""
        try:
            await self.rebuild.settled()  # (its backups' copies then)
            await self.launched(alloc_id, wrote, reads, worker=worker, key=key, stats=stats)
        except Exception:  # noqa: BLE001
            logger.exception("dgvm: the report of a task on %s (allocation %s) failed", worker, alloc_id)

    def _check_indices(self, name: str, alloc_id: AllocId, indices: list) -> list:
        """``indices`` if each names a chunk of ``alloc_id`` (when it is still allocated)."""
        alloc = self.gvat.allocations.get(alloc_id)
        if alloc is not None and indices and not 0 <= min(indices) <= max(indices) < alloc.nchunks:
            raise InvalidArgument(f"{name}: allocation {alloc_id} has chunks 0..{alloc.nchunks - 1}, "
                                  f"not {[i for i in indices if not 0 <= i < alloc.nchunks][:8]}")
        return indices

    def _check_reads(self, reads: dict) -> dict:
        """A launch's ``reads`` (alloc id -> hits, misses, chunks at home, chunks remote),
        with its ids as ints."""
        out = {}
        for key, r in reads.items():
            read_id = int(key) if isinstance(key, str) and key.isdigit() else arguments.integer("reads key", key)
            r = arguments.mapping(f"reads[{key!r}]", r)
            for count in ("hits", "misses"):
                arguments.integer(f"reads[{key!r}][{count!r}]", r.get(count))
            for where in ("home", "remote"):
                self._check_indices(f"reads[{key!r}][{where!r}]", read_id,
                                    arguments.integers(f"reads[{key!r}][{where!r}]", r.get(where)))
            out[read_id] = r
        return out

    async def invalidate(self, alloc_id: AllocId, indices, key: str | None = None):
        """Chunks were written (by task ``key``): versions move on, read replicas go,
        backups copy them; the chunks whose copies got the write remember ``key``
        (``Allocation.last_writer``: a task run again after its worker left passes them over)."""
        drop, refresh = self.gvat.wrote(alloc_id, indices)
        holders = list(drop)
        # (A holder whose connection broke is waited for until the news that it left, at
        # most ``LeftPeers``' grace: only then is its failed drop known to be harmless.)
        jobs = [self._ask(a, messages.DROP_REPLICAS, alloc_id=alloc_id, indices=idx, reads=True)
                for a, idx in drop.items()]
        if refresh:
            jobs.append(self.durability.refresh(self.gvat.allocations[alloc_id], refresh, key))
        if jobs:  # (most writes have no copy elsewhere)
            # Every job awaited before the write is answered, whatever one of them meets.
            results = await asyncio.gather(*jobs, return_exceptions=True)
            for k, r in enumerate(results):
                if not isinstance(r, BaseException):
                    continue
                if k < len(holders) and self._gone(holders[k], r):
                    continue  # its read replica went with it: nothing there to drop
                raise r

    def _gone(self, worker: WorkerAddress, error: BaseException) -> bool:
        """Did a request to ``worker`` fail because it is closing (``PeerClosing``: its
        handlers are gone) or left the cluster, rather than refuse, or pass on a broken
        request of its own?"""
        return isinstance(error, PeerClosing) or (
            broken_connection(error) and worker not in self.scheduler.workers)

    async def move(self, alloc, indices, target, reason: str) -> list[int]:
        """Make ``target`` the home of chunks ``indices`` of ``alloc``: it pulls them (or
        promotes its replicas), the GVAT records the new homes, the old homes are told to
        release their copies (in the background: ``scheduler.releases``), and the owner's
        client hears of it (event ``messages.MOVED_TOPIC``)."""
        plan = migration.plan_move(self.gvat, alloc, indices, target, transfer.choose)
        if not plan:
            return []
        moved: list[int] = []
        try:
            # The target does the releases sent to it first: one still on its way could
            # drop the chunk this pull brings back (scheduler.releases).
            # A full device or a worker still busy with releases is raised here.
            try:
                pulled: Pulled = await self._ask(
                    target.address, messages.PULL, alloc_id=alloc.alloc_id, owner=alloc.owner,
                    chunks=[c.to_dict() for c in plan],
                    after_release=self.releases.last_sent(target.address),
                )
            except ChunkLost:
                if alloc.copies <= 1:
                    raise
                # A home left during the move: its chunks live on where copies take over
                # (not moved here; a later move may take them).
                await self.durability.settle(alloc)
                if all(self.gvat.inventory.by_uid[int(alloc.homes[c.index])].alive for c in plan):
                    return []
                raise
            if alloc.alloc_id not in self.gvat.allocations:  # freed meanwhile
                await self._ask(target.address, messages.STORE_FREE, alloc_id=alloc.alloc_id)
                return []
            moved, release = migration.set_home(
                self.gvat, alloc, pulled.moved, pulled.versions, target, reason
            )
            stale = sorted(set(pulled.moved) - set(moved))  # written meanwhile: not moved
            if stale:
                release.setdefault(target.address, []).extend(stale)
            for a, idx in release.items():  # (a release also lets held-back writes go on)
                self.releases.send(self.scheduler.stream_comms.get(a), a, alloc.alloc_id, idx)
        finally:
            migration.finish_move(alloc, plan)
            self._thaw(alloc.alloc_id, [c for c in plan if c.index not in set(moved)])
        if moved and alloc.copies > 1:  # a backup that became the home is made again
            self.spawn(self.durability.replenish([alloc.alloc_id]))
        if moved:
            alloc.moves = next(self._move_numbers)  # (a client whose map holds it skips the event)
            self.scheduler.log_event(messages.MOVED_TOPIC, {
                "alloc_id": alloc.alloc_id, "owner": alloc.owner, "indices": moved,
                "worker": target.address, "reason": reason, "moves": alloc.moves,
            })
        return moved

    def _thaw(self, alloc_id: AllocId, chunks: list) -> None:
        """The homes of ``chunks`` (``PullChunk``s a move did not move) may have held their
        writes back for it (``ChunkStore.freeze``): they go on."""
        by_home: dict = {}
        for c in chunks:
            by_home.setdefault(c.home, []).append(c.index)
        for home, idx in by_home.items():
            streams.tell(self.scheduler.stream_comms.get(home), messages.thaw(alloc_id, idx))

    def _live_record(self, worker: str):
        rec = self.gvat.inventory.by_address.get(worker)
        if rec is None:
            raise InvalidAddress(
                f"no dgvm worker at {worker!r}; workers: {sorted(self.gvat.inventory.by_address)}"
            )
        return rec

    async def migrate(self, alloc_id: AllocId, indices: list, worker: WorkerAddress,
                      owner: ClientId | None = None) -> Migrated:
        """Move the home of chunks ``indices`` of an allocation to ``worker``; answers the
        chunks moved and the new chunk map."""
        alloc = self.gvat.get(arguments.integer("alloc_id", alloc_id), arguments.maybe_text("owner", owner))
        indices = arguments.integers("indices", indices)
        bad = [i for i in indices if not 0 <= i < alloc.nchunks]
        if bad:
            raise InvalidAddress(
                f"indices: allocation {alloc_id} has chunks 0..{alloc.nchunks - 1}; asked for {bad[:8]}"
            )
        target = self._live_record(arguments.text("worker", worker))
        moved = await self.move(alloc, indices, target, reason="migrate")
        # A chunk written while it was copied stays (``migration.set_home``): moved again.
        # That write may have ended before this request came, its report to the GVAT
        # still on the worker's stream: the caller asked for the chunk after its write.
        done = set(moved)
        for _ in range(MIGRATE_TRIES - 1):
            left = [i for i in dict.fromkeys(indices) if alloc.alloc_id in self.gvat.allocations
                    and int(alloc.homes[i]) != target.uid and i not in done]
            if not left or not target.alive:
                break
            try:
                done.update(await self.move(alloc, left, target, reason="migrate"))
            except Exception as e:  # noqa: BLE001  (what the first pass moved is the answer)
                logger.info("dgvm: moving chunks %s of allocation %s again failed: %s", left, alloc.alloc_id, e)
                break
        moved = [i for i in dict.fromkeys(indices) if i in done]  # (in the order asked)
        return Migrated(moved, self.gvat.chunk_map(alloc), alloc.moves)

    async def rebalance(self, owner: ClientId | None = None):
        """Even out device memory by moving homes of ``owner``'s chunks (all chunks when
        no owner is given); returns {"chunks": moved, "bytes": moved}."""
        owner = arguments.maybe_text("owner", owner)
        allocs = [
            self.gvat.allocations[a]
            for a in (self.gvat.owned_by(owner) if owner else list(self.gvat.allocations))
        ]
        groups: dict = {}
        for alloc, i, target in migration.rebalance_plan(self.gvat, allocs):
            groups.setdefault((alloc.alloc_id, target.uid), (alloc, target, []))[2].append(i)
        results = await asyncio.gather(
            *(self.move(a, idx, t, reason="rebalance") for a, t, idx in groups.values()),
            return_exceptions=True,
        )
        chunks = nbytes = 0
        for (alloc, _, _), r in zip(groups.values(), results):
            if isinstance(r, BaseException):
                logger.info("rebalancing allocation %s: %s", alloc.alloc_id, r)
                continue
            chunks += len(r)
            nbytes += int(alloc.sizes()[r].sum()) if r else 0
        return {"chunks": chunks, "bytes": nbytes}

    def replicas_dropped(self, worker: WorkerAddress, dropped: dict):
        worker = arguments.text("worker", worker)
        checked = {}
        for key, indices in arguments.mapping("dropped", dropped).items():
            alloc_id = int(key) if isinstance(key, str) and key.isdigit() else arguments.integer("dropped key", key)
            checked[alloc_id] = self._check_indices(f"dropped[{key!r}]", alloc_id,
                                                    arguments.integers(f"dropped[{key!r}]", indices))
        migration.replicas_dropped(self.gvat, worker, checked)

    async def set_replicas(self, alloc_id: AllocId, replicas: int, owner: ClientId | None = None) -> ChunkMap:
        """Keep ``replicas`` copies of each chunk of an allocation from now on: new
        backups are copied from the homes before this answers (all or nothing), extra ones
        are dropped."""
        alloc = self.gvat.get(arguments.integer("alloc_id", alloc_id), arguments.maybe_text("owner", owner))
        await self.durability.set_copies(alloc, arguments.integer("replicas", replicas, 1))
        return self.gvat.chunk_map(alloc)

    def releases_sent(self, worker: WorkerAddress):
        """The ticket of the last release sent to ``worker`` (None: none since it joined):
        a worker asked to wait for a later one refuses (``ChunkStorePlugin``)."""
        return self.releases.last_sent(arguments.text("worker", worker))

    async def stats(self):
        """Counters per worker (asked of the live stores) and per allocation."""
        live = [r.address for r in self.gvat.inventory.live()]
        answers = await asyncio.gather(  # the stores' figures after every move so far
            *(self._ask(a, messages.STORE_INFO, after_release=self.releases.last_sent(a))
              for a in live),
            return_exceptions=True,
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

    def translate(self, vaddrs: list[int]) -> Translation:
        return self.gvat.translate_many(arguments.integers("vaddrs", vaddrs))

    async def chunk_map(self, alloc_id: AllocId) -> ChunkMap:
        """The allocation's chunk map (after copies took over the chunks of a worker that
        left, when they are about to)."""
        alloc = self.gvat.get(arguments.integer("alloc_id", alloc_id))
        await self.durability.settle(alloc)
        return self.gvat.chunk_map(alloc)

    async def table(self, alloc_id: AllocId | None = None, chunks: bool = False):
        """``table_rows``, once copies took over the chunks of workers that left."""
        await self.durability.settle()
        return self.table_rows(alloc_id, chunks)

    def table_rows(self, alloc_id: AllocId | None = None, chunks: bool = False):
        alloc_id, chunks = arguments.maybe_integer("alloc_id", alloc_id), arguments.flag("chunks", chunks)
        allocs = (
            [self.gvat.get(alloc_id)] if alloc_id is not None
            else list(self.gvat.allocations.values())
        )
        return [self.gvat.info(a, with_chunks=chunks).to_dict() for a in allocs]

    def workers(self, include_lost: bool = False):
        include_lost = arguments.flag("include_lost", include_lost)
        self._sync_inventory()
        inv = self.gvat.inventory
        recs = list(inv.by_uid.values()) if include_lost else inv.live()
        live = inv.live()
        bw = inv.effective_bandwidth(live)
        base = min(bw.values()) if bw else 1.0
        return [inv.info(r, bw.get(r.uid, 0.0) / base).to_dict() for r in recs]


def meta(alloc, token: str) -> AllocationMeta:
    """What a worker holding chunks of ``alloc`` keeps of it (``scheduler.rebuild``), given
    out by the GVAT ``token``."""
    return AllocationMeta(scheduler=token,
        vaddr=alloc.vaddr, nbytes=alloc.nbytes, nchunks=alloc.nchunks, chunk_bytes=alloc.chunk_bytes,
        placement=alloc.placement, created=alloc.created, copies=alloc.copies, dtype=alloc.dtype,
        shape=alloc.shape, grid_chunks=alloc.grid_chunks,
    )


def _colocate(colocate):
    """An allocation's ``colocate``: None, a partner's id, or [id, picks] (-1: none)."""
    if colocate is None:
        return None
    if isinstance(colocate, (list, tuple)):
        other, picks = arguments.sequence("colocate", colocate, 2)
        return [arguments.integer("colocate", other, 1), arguments.integers("colocate picks", picks, -1)]
    return arguments.integer("colocate", colocate, 1)


# A scheduler imports its preloads before it builds its HTTP server: listing the dashboard's
# routes now puts its pages into distributed's own dashboard (dgvm/dashboard/mount.py).
dashboard.register()


def dask_setup(scheduler):
    """Preload entry point: ``dask scheduler --preload dgvm.scheduler``. A bad dgvm
    configuration closes the scheduler (see ``config.check_in_preload``)."""
    config.check_in_preload(scheduler)
    scheduler.add_plugin(GVATPlugin(), name=PLUGIN_NAME)


class _WorkersLeft(Exception):
    """A placement failed because workers it chose left the cluster: place again."""
