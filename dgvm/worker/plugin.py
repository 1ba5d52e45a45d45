"""The worker side of dgvm: a WorkerPlugin that holds this worker's chunk store.

Load it as a preload (``dask worker ADDR --preload dgvm.worker --dgvm-device-memory 4GiB``)
or let ``dgvm.LocalCluster`` / ``dgvm.connect`` install it. The plugin opens the device
backend, measures the device once, reports capacity, use and profile in every heartbeat
(``worker.metrics[messages.HEARTBEAT]``), and serves the store's RPC handlers. Store
operations run in order on one thread of their own, so memory copies never stall the
worker's event loop. The plugin is the worker's state of dgvm, one per worker: the store,
the transfer paths with the mappings of peers' memory they keep (``transfer.Transfers``),
the threads, the retirement of exported buffers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import click
import numpy as np
from distributed import WorkerPlugin
from distributed.protocol import to_serialize

from dgvm import backends, config, dask_compat, gc_pauses, streams, transfer
from dgvm.protocol import arguments, messages
from dgvm.protocol.errors import (
    ChunkLost, DgvmError, InvalidAddress, InvalidArgument, InvalidArgumentType, OutOfDeviceMemory,
)
from dgvm.protocol.messages import PEER_LEFT, RELEASE, THAW, WRITTEN, PullChunk, Pulled
from dgvm.protocol.records import AllocationMeta, AllocId, ClientId, ReleaseTicket, WorkerAddress
from dgvm.transfer.fetch import request_exports
from dgvm.transfer.ipc_mappings import BufferGone
from dgvm.transfer.ipc_retire import IpcRetirement
from dgvm.worker.context_loss import ContextWatch
from dgvm.worker.direct import DirectTasks, closing
from dgvm.worker.pushes import Pushes
from dgvm.worker.store import ChunkLeaving, ChunkStore, StoredChunk

logger = logging.getLogger("dgvm.worker")

PLUGIN_NAME = messages.STORE_PLUGIN
RETIRE_WAIT = 2.0  # seconds a free waits for buffers peers had mapped to come back
RELEASE_WAIT = 30.0  # seconds a request waits for the releases sent here before it
SLOW_RELEASE = 5.0  # seconds past which a release is logged
INLINE_PIECE = 1 << 20  # bytes of a piece read on the event loop when its write has run


class ChunkStorePlugin(WorkerPlugin):
    """Holds a ``ChunkStore`` on one worker and serves it over the worker's comm."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self, backend: str | None = None, device_memory=None, device_speed=None):
        self.backend_name = backend or config.get("backend")
        self.device_memory = (
            config.to_bytes(device_memory) if device_memory is not None
            else config.get_bytes("device-memory")
        )
        speed = device_speed if device_speed is not None else config.get("device-speed")
        self.device_speed = float(speed) if speed is not None else None
        self.store: ChunkStore | None = None
        self.transfers: transfer.Transfers | None = None
        self.pushes: Pushes | None = None
        self.profile = None

    # Handlers the worker serves (messages.WORKER_HANDLERS; a test checks both).
    def handlers(self) -> dict:
        return {
            messages.STORE_ALLOCATE: self.allocate,
            messages.STORE_FREE: self.free,
            messages.WRITE: self.write,
            messages.READ: self.read,
            messages.STORE_INFO: self.info,
            messages.EXPORT: self.export,
            messages.DROP_REPLICAS: self.drop_replicas,
            messages.PULL: self.pull,
            messages.IPC_FORGET: self.ipc_forget,
            messages.REFRESH: self.refresh,
            messages.PROMOTE: self.promote,
            messages.STORE_REPORT: self.report,
            messages.PUSHED: self.pushed,
        }

    def setup(self, worker):
        backend = backends.create(self.backend_name, self.device_memory, self.device_speed)
        self.store = ChunkStore(backend, worker.address)
        self.transfers = transfer.Transfers()
        self.pushes = Pushes(worker, self)
        self.profile = backend.profile(config.get_bytes("profile-bytes"), host=transfer.host_id(worker.ip))
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="dgvm-store")
        # Exports take no store lock and must never queue behind an operation that waits
        # for one: a task holding this store's lock may be waiting on a peer whose own task
        # waits for an export from here.
        self._export_executor = ThreadPoolExecutor(2, thread_name_prefix="dgvm-export")
        # A move's export freezes its chunks, which waits for the store's lock: on threads
        # of its own, so that it never holds up the plain exports a task here waits for.
        self._freeze_executor = ThreadPoolExecutor(2, thread_name_prefix="dgvm-freeze")
        self._release_done = -1  # the ticket of the last release done here (scheduler.releases)
        self._releases = asyncio.Condition()
        self.worker = worker
        self.context = ContextWatch(worker, backend)  # a fault that ends the device context
        # Refusals (an allocation gone, a device full, ...) are answered as data.
        worker.handlers.update(messages.serve(self.handlers()))
        # Clients' operations, straight from them (its own connection: not a served call).
        self.direct = DirectTasks(worker, self)
        worker.handlers[messages.DIRECT] = self.direct.serve
        worker.handlers[messages.DIRECT_ENDED] = messages.served(self.direct.ended_here)
        worker.metrics[messages.HEARTBEAT] = lambda w: self.metrics()
        worker.extensions[messages.EXTENSION] = self.store
        exports = getattr(backend, "exports", None)
        # Buffers peers map through IPC are freed after asking them (cuda).
        self.retirement = (IpcRetirement(worker, exports, self.transfers.mappings)
                           if exports is not None else None)
        worker.stream_handlers[PEER_LEFT] = self.peer_left
        worker.stream_handlers[RELEASE] = self.release
        worker.stream_handlers[THAW] = self.thaw
        worker.stream_handlers[WRITTEN] = self.written
        streams.tune(worker.batched_stream)
        # The scheduler may go and come back at its address: the store stays, and tells the
        # new one what it holds (``report``; ``dgvm.scheduler.rebuild``).
        dask_compat.outlive_scheduler(worker, config.get_seconds("scheduler-wait"), _Outliving(self))
        logger.info("dgvm chunk store on %s: %s", worker.address, self.profile)

    def transition(self, key, start, finish, **kwargs):
        # Every transition of every task here: O(1).
        if finish == "error" and self.store is not None:
            self.context.task_failed(key)

    # Still answered once closed: frees may be on the way, and this process's mappings
    # of peers' buffers outlive the store.
    KEPT_AFTER_TEARDOWN = (messages.STORE_FREE, messages.IPC_FORGET)

    async def teardown(self, worker):
        for op in [*self.handlers(), messages.DIRECT, messages.DIRECT_ENDED]:
            if op not in self.KEPT_AFTER_TEARDOWN:
                worker.handlers.pop(op, None)
        # An unknown stream message would close the worker: these may still come.
        worker.stream_handlers[PEER_LEFT] = lambda **_: None
        worker.stream_handlers[RELEASE] = lambda **_: None
        worker.stream_handlers[THAW] = lambda **_: None
        worker.stream_handlers[WRITTEN] = lambda **_: None
        worker.metrics.pop(messages.HEARTBEAT, None)
        worker.extensions.pop(messages.EXTENSION, None)
        if self.store is not None:
            if self.retirement is not None:  # peers close their mappings first
                await self.retirement.forget_everywhere()
            store, self.store = self.store, None

            def close():  # waits for the store's thread: off the event loop
                self._executor.shutdown(wait=True)
                self._export_executor.shutdown(wait=True)
                self._freeze_executor.shutdown(wait=True)
                store.close()
                self.transfers.close()

            try:  # (the submission alone: an error of close itself must not close twice)
                closing = asyncio.get_running_loop().run_in_executor(None, close)
            except RuntimeError:  # the process is exiting and starts no threads: here, then
                close()
            else:
                await closing

    def metrics(self) -> dict:
        m = {"profile": self.profile.to_dict(), **self.store.metrics()}
        # The scheduler unlinks it if this process dies (dgvm.scheduler.departures).
        m["arena"] = getattr(self.store.backend, "shm_name", None)
        exports = getattr(self.store.backend, "exports", None)
        if exports is not None:  # CUDA IPC mappings kept: this worker's and its peers'
            m["stats"]["ipc"] = {**self.transfers.mappings.counters(), **exports.counters()}
        return m

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _submit(self, fn, *args) -> asyncio.Future | None:
        """``fn(*args)`` on the store's thread, as a future; None when that thread is gone:
        the worker closed, or its process is exiting (the interpreter stops executors)."""
        try:
            return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except RuntimeError:  # "cannot schedule new futures after shutdown"
            return None

    # -- handlers ------------------------------------------------------------------------
    async def allocate(self, alloc_id: AllocId, owner: ClientId, indices: list, sizes: list,
                       zero: bool = True, after_release: ReleaseTicket | None = None,
                       backups: list | None = None, backup_sizes: list | None = None,
                       meta: dict | None = None) -> int:
        """Create chunks ``indices`` of ``alloc_id``, and backups of chunks ``backups``
        (``replicas=k``); a full device is refused (OutOfDeviceMemory, answered as data).
        ``meta``: the allocation's ``AllocationMeta``, kept for a scheduler that restarts."""
        alloc_id, owner = arguments.integer("alloc_id", alloc_id), arguments.text("owner", owner)
        indices, sizes = arguments.integers("indices", indices), arguments.integers("sizes", sizes, 1)
        backups = arguments.integers("backups", backups or [])
        backup_sizes = arguments.integers("backup_sizes", backup_sizes or [], 1)
        if len(indices) != len(sizes) or len(backups) != len(backup_sizes):
            raise InvalidArgument(f"sizes: {len(sizes)} given for {len(indices)} indices, "
                                  f"{len(backup_sizes)} for {len(backups)} backups")
        arguments.flag("zero", zero)
        meta = _meta(meta)
        await self._after_releases(after_release)  # their memory first (a timeout: OOM says so)
        made = await self._run(self.store.allocate, alloc_id, owner, indices, sizes, zero,
                               backups, backup_sizes)
        self.store.remember(alloc_id, meta)
        return made

    async def refresh(self, alloc_id: AllocId, owner: ClientId, chunks: list, new: bool = False,
                      after_release: ReleaseTicket | None = None, meta: dict | None = None) -> int:
        """Copy chunks written at their homes into their backups here (``chunks``: [index,
        home, path, version] each; one export request per home), before the write counts
        as done; ``new`` backups once the releases sent here up to ``after_release`` are
        done (a chunk that moved away from here is a backup here only after its release).
        A home that left meanwhile is ChunkLost; a chunk no longer homed where the request
        says, or releases that take too long, a DgvmError (the scheduler drops the backup
        then)."""
        alloc_id, owner = arguments.integer("alloc_id", alloc_id), arguments.text("owner", owner)
        new = arguments.flag("new", new)
        self._open_store().remember(alloc_id, _meta(meta))
        if not await self._after_releases(after_release):  # (their memory first, as an allocation)
            raise DgvmError(f"{self.worker.address} did not do the chunk releases sent to it "
                            f"within {RELEASE_WAIT:.0f} s; no backup of allocation {alloc_id} here")
        by_home: dict[tuple, list] = {}
        for k, c in enumerate(arguments.sequence("chunks", chunks)):
            c = arguments.sequence(f"chunks[{k}]", c)
            if len(c) != 4:
                raise InvalidArgument(f"chunks[{k}]: [index, home, path, version], not {c!r}")
            index, version = arguments.integer(f"chunks[{k}] index", c[0], 0), arguments.integer(f"chunks[{k}] version", c[3], 0)
            home, path = arguments.text(f"chunks[{k}] home", c[1]), arguments.text(f"chunks[{k}] path", c[2], transfer.NAMES)
            by_home.setdefault((home, path), []).append((index, version))
        groups = list(by_home.items())
        descs = await asyncio.gather(*(
            self.transfers.left_peers.call(
                home, request_exports(self.worker, home, alloc_id, [i for i, _ in group], path),
                lambda home=home: ChunkLost(f"worker {home}, the home of chunks of allocation "
                                            f"{alloc_id}, left the cluster while they were copied"))
            for (home, path), group in groups
        ))
        for ((home, path), group), group_descs in zip(groups, descs):
            for (index, version), desc in zip(group, group_descs):
                if desc is messages.MOVED:
                    raise DgvmError(f"chunk {index} of allocation {alloc_id} is no longer homed on "
                                    f"{home}: its backup on {self.worker.address} was not refreshed")
                store = self._open_store()  # (it may close while the exports travel)
                try:
                    await self._run(store.refresh, alloc_id, owner, index, self.transfers[path],
                                    desc, version, (home, desc.get("writes")), new)
                except BufferGone:  # (freed or moved after it was exported)
                    raise DgvmError(f"chunk {index} of allocation {alloc_id} left {home} while its "
                                    f"backup on {self.worker.address} copied it") from None
        return sum(len(g) for _, g in groups)

    async def promote(self, alloc_id: AllocId, owner: ClientId, indices: list, meta: dict | None = None) -> list:
        """The backups here of chunks ``indices`` become their homes (the home left);
        answers the chunks promoted (a backup a free dropped meanwhile is not)."""
        alloc_id, owner = arguments.integer("alloc_id", alloc_id), arguments.text("owner", owner)
        indices = arguments.integers("indices", indices)
        store = self._open_store()
        store.remember(alloc_id, _meta(meta))
        # On the loop, not the store's thread: a task there may hold the store's lock
        # waiting for this promotion (``ChunkStore.promote_backup``).
        return [i for i in indices if store.promote_backup(alloc_id, owner, i)]

    def _open_store(self) -> ChunkStore:
        """The store, or a refusal when the worker is closing (it has none then)."""
        if self.store is None:
            raise DgvmError(f"worker {self.worker.address} is closing")
        return self.store

    async def free(self, alloc_id: AllocId) -> int:
        alloc_id = arguments.integer("alloc_id", alloc_id)
        store = self.store
        job = None if store is None else self._submit(store.free, alloc_id)
        if job is None:
            return 0  # the store closed with the worker, or is closing: its memory goes with it
        try:
            n = await job
        except RuntimeError:
            if self.store is None:
                return 0  # closed while it ran: same as above
            raise
        self.pushes.forget(alloc_id)  # (after the free: an export that ended meanwhile may have remembered a reader)
        await self._retired()
        return n

    async def _retired(self):
        # A free answers once the memory is back, also that of buffers peers had mapped
        # (for a while: a peer that does not answer is asked again later, unawaited).
        if self.retirement is not None and self.retirement.exports.any_retiring():
            await asyncio.wait([asyncio.ensure_future(self.retirement.run())], timeout=RETIRE_WAIT)

    def pushed(self, pieces: list) -> int:
        """Bytes of chunks tasks here read, pushed by their homes (``dgvm.worker.pushes``)."""
        checked = []
        for k, p in enumerate(arguments.sequence("pieces", pieces)):
            if not isinstance(p, dict) or not isinstance(p.get("desc"), dict):
                raise InvalidArgument(f"pieces[{k}] must be a dict with a descriptor, not {type(p).__name__}")
            span = arguments.integers(f"pieces[{k}].span", p.get("span"))
            if len(span) != 2 or not 0 <= span[0] < span[1]:
                raise InvalidArgument(f"pieces[{k}].span must be [start, stop) with 0 <= start < stop: {span}")
            checked.append({"alloc_id": arguments.integer(f"pieces[{k}].alloc_id", p.get("alloc_id")),
                            "index": arguments.integer(f"pieces[{k}].index", p.get("index")), "span": span,
                            "key": arguments.text(f"pieces[{k}].key", p.get("key")),
                            "source": arguments.text(f"pieces[{k}].source", p.get("source")), "desc": p["desc"]})
        return self.pushes.pushed(checked)

    def peer_left(self, worker: WorkerAddress, arena: str | None = None):
        """The scheduler says a worker left (stream message ``messages.PEER_LEFT``): the
        requests to it in flight stop waiting, and its arena is no longer mapped here (its
        memory goes back once no process maps it)."""
        self.transfers.left_peers.left(worker)
        if self.pushes is not None:
            self.pushes.peer_left(worker)
        if arena is not None:
            self.transfers.arenas.forget(arena)
        if self.retirement is not None:
            self.retirement.peer_left(worker)

    async def write(self, alloc_id: AllocId, owner: ClientId, pieces: list, key: str | None = None) -> int:
        """Write ``pieces`` of home chunks here, then tell the GVAT (which refreshes the
        backups before this answers). ``key``: the task whose write this is (one forwarded
        to a chunk's new home): the backups that got it remember it, and the task, run
        again after its worker left, does not write those chunks twice."""
        alloc_id, owner = arguments.integer("alloc_id", alloc_id), arguments.text("owner", owner)
        key = arguments.maybe_text("key", key)
        pieces = _pieces(pieces, with_data=True)
        loop = asyncio.get_running_loop()
        while True:
            try:
                n = await self._run(self.store.write, alloc_id, owner, pieces)
                break
            except ChunkLeaving as e:  # a move copies it: wait (off the store's thread) for its end
                await loop.run_in_executor(None, self.store.wait_writable, e.alloc_id, e.index)
        # Readers never see a stale replica: drop them before the write is acknowledged.
        await messages.call(self.worker.scheduler, messages.LAUNCHED,
                            alloc_id=alloc_id, wrote=sorted({p[0] for p in pieces}), reads={}, key=key)
        return n

    async def read(self, alloc_id: AllocId, owner: ClientId, pieces: list):
        alloc_id, owner = arguments.integer("alloc_id", alloc_id), arguments.text("owner", owner)
        pieces = _pieces(pieces, with_data=False)
        arrays = await self._run(self.store.read, alloc_id, owner, pieces)
        return [to_serialize(a) for a in arrays]

    async def export(self, alloc_id: AllocId, indices: list, path: str, to: WorkerAddress | None = None,
                     move: bool = False, have: list | None = None, span: list | None = None):
        alloc_id, indices = arguments.integer("alloc_id", alloc_id), arguments.integers("indices", indices)
        if span is not None:
            span = arguments.integers("span", span)
            if len(span) != 2 or not 0 <= span[0] < span[1] or move:
                raise InvalidArgument(f"span must be [start, stop) with 0 <= start < stop, not of a move: {span}")
        path, to = arguments.text("path", path, transfer.NAMES), arguments.maybe_text("to", to)
        move = arguments.flag("move", move)
        if have is not None:
            have = [arguments.integers(f"have[{k}]", pair) for k, pair in enumerate(arguments.sequence("have", have))]
            if any(len(pair) != 2 for pair in have):
                raise InvalidArgument("have must list [chunk index, write count] pairs")
        loop = asyncio.get_running_loop()
        if move:
            return await self._export_moving(alloc_id, indices, path, to, dict(have or []))
        if not self.transfers[path].export_reads:  # a descriptor: no thread hop
            # The peer copies from this device outside its stream: after the work tasks
            # left running (a read here is on that stream, after it anyway). Waited for
            # off the export threads, which other exports need meanwhile.
            queued = self.store.backend.queued
            if not queued.done():
                await loop.run_in_executor(None, queued.wait)
            return self._export(alloc_id, indices, path, to, span)
        descs = await self.read_exports(alloc_id, indices, path, to, span)
        if span is not None and to is not None:  # (a reader: these bytes may be pushed to it next time)
            for i, desc in zip(indices, descs):
                if messages.SPECIAL not in desc and self.store.is_home(alloc_id, i):  # (not moved or freed meanwhile)
                    self.pushes.remember(alloc_id, i, span, to)
        return descs

    async def read_exports(self, alloc_id: int, indices: list, path: str, to, span=None) -> list:
        """The descriptors of chunks ``indices`` for ``path`` whose export reads the bytes
        (the comm path; only bytes ``span`` of each, if given): as ``export`` answers them,
        also for a push (``dgvm.worker.pushes``)."""
        if span is not None and (span[1] - span[0]) * len(indices) <= INLINE_PIECE and all(
                self.store.backend.written_out(self.store.last_write(alloc_id, i)) for i in indices):
            # A piece (a neighbour's halo rows) whose last write has run: a copy of
            # microseconds, read here rather than on a thread (two wake-ups less on the
            # path of a task waiting for it).
            return self._export(alloc_id, indices, path, to, span)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._export_executor, self._export, alloc_id, indices, path, to, span)

    def _export(self, alloc_id, indices, path, to, span=None):
        # No store lock (see setup): a read of a chunk a write may change meanwhile; its
        # write count, taken first, is at most that of the data copied (a replica's source).
        p = self.transfers[path]
        out = []
        if span is None:  # (a piece is read for one task: no copy stays that a write must reach)
            self.store.shared(alloc_id, indices)  # (before the copy: a write after it waits for the GVAT)
        for i in indices:
            try:
                if self.store.is_home(alloc_id, i):
                    writes = self.store.write_count(alloc_id, i)
                    held = self.store.chunk(alloc_id, i, None)
                    if span is not None and span[1] > held.nbytes:
                        raise InvalidArgument(f"span {span} is past the end of chunk {i} of allocation {alloc_id}")
                    desc = {**p.export(self.store, alloc_id, i, to, span), "writes": writes}
                    # A piece's bytes were read without the store's lock: a release (a move
                    # ended, a free) meanwhile may have given the buffer to another chunk.
                    if span is not None and not (self.store.is_home(alloc_id, i)
                                                 and self.store.local(alloc_id, i) is held):
                        desc = messages.moved()
                    elif span is not None and self.store.leaving(alloc_id, i):
                        # A move is copying it away: once the GVAT names the new home, a
                        # write may follow there before this copy is released. The reader
                        # asks the GVAT (``Access._read_piece``).
                        desc["leaving"] = True
                    out.append(desc)
                else:
                    out.append(messages.moved())
            except (InvalidAddress, RuntimeError) as e:  # released meanwhile (the store changed under it)
                self._moved_or_failed(alloc_id, i, e)
                out.append(messages.moved())
        return out

    def _moved_or_failed(self, alloc_id: int, index: int, error: Exception) -> None:
        """An export of a home chunk raised ``error``: fine if the chunk was released
        meanwhile (the reader asks the GVAT where it is now); if it is still here, the
        device or the backend failed reading it (a CUDA error is a ``RuntimeError``), and
        the reader is told so, not sent to look for it elsewhere again and again."""
        store = self.store
        if isinstance(error, InvalidAddress) or store is None or not store.is_home(alloc_id, index):
            return
        if store.local(alloc_id, index) is None:
            return
        raise DgvmError(f"chunk {index} of allocation {alloc_id} on {self.worker.address} could not be "
                        f"read for a copy: {type(error).__name__}: {error}") from error

    async def _export_moving(self, alloc_id, indices, path, to, have: dict):
        """Export chunks that move to ``to``: each is frozen here first (its writes wait
        until the scheduler says the move ended: ``release`` or ``thaw``), so the copy is
        the chunk's last value here. A chunk of which ``to`` holds a copy as of its
        current write count (``have``) is not copied again. A peer that copies from this
        device outside its stream (CUDA IPC) does so after the work tasks left running.
        Freezing takes the store's lock, never awaited on the event loop: when nothing
        holds it and no work is left running, all is done here at once (the usual case:
        no thread hop); otherwise on an export thread. (Freezing twice is harmless.)"""
        store, p = self._open_store(), self.transfers[path]
        if not p.export_reads and store.lock.acquire(blocking=False):  # (comm's export reads)
            try:
                writes = [store.freeze(alloc_id, i) for i in indices]
                if store.backend.queued.done():  # (else waited for on the thread: frozen again there)
                    return self._describe_moving(alloc_id, indices, writes, p, to, have)
            finally:
                store.lock.release()
        return await asyncio.get_running_loop().run_in_executor(
            self._freeze_executor, self._export_moving_waiting, alloc_id, indices, p, to, have)

    def _export_moving_waiting(self, alloc_id, indices, p, to, have: dict):
        # On an export thread: the freezes may wait for a task's write in progress.
        writes = [self.store.freeze(alloc_id, i) for i in indices]
        if not p.export_reads:  # (a read of the comm path comes after it on the stream)
            self.store.backend.queued.wait()
        return self._describe_moving(alloc_id, indices, writes, p, to, have)

    def _describe_moving(self, alloc_id, indices, writes, p, to, have: dict) -> list:
        out = []
        for i, w in zip(indices, writes):
            if w is None:
                out.append(messages.moved())
            elif have.get(i) == w:
                out.append({"current": True, "writes": w})
            else:
                try:
                    out.append({**p.export(self.store, alloc_id, i, to), "writes": w})
                except (InvalidAddress, RuntimeError):
                    out.append(messages.moved())
        return out

    async def pull(self, alloc_id: AllocId, owner: ClientId, chunks: list,
                   after_release: ReleaseTicket | None = None, meta: dict | None = None) -> Pulled:
        """Become the home of ``chunks`` (``PullChunk`` dicts): promote a current replica
        held here, or fetch the chunk from its home (one export request per home), once
        the releases sent here up to ``after_release`` are done. Refused with
        OutOfDeviceMemory when they do not fit, and with DgvmError when the releases take
        too long."""
        alloc_id, owner = arguments.integer("alloc_id", alloc_id), arguments.text("owner", owner)
        chunks = [_pull_chunk(k, c) for k, c in enumerate(arguments.sequence("chunks", chunks))]
        self._open_store().remember(alloc_id, _meta(meta))
        if not await self._after_releases(after_release, memory=False):  # their order only
            raise DgvmError(f"{self.worker.address} did not do the chunk releases sent to it "
                            f"within {RELEASE_WAIT:.0f} s; chunks of allocation {alloc_id} stay")
        store = self.store
        need: dict[tuple[str, str], list[PullChunk]] = {}
        local = set()  # chunks of which a replica is here: its home says whether it is current
        for c in chunks:
            r = store.replica(alloc_id, c.index)
            if r is not None and r.version == c.version and r.source and r.source[0] == c.home:
                local.add(c.index)
            need.setdefault((c.home, c.path), []).append(c)
        groups = list(need.items())
        t0 = time.perf_counter()  # the first chunk's time includes the request
        # One export request per home, all at once (each freezes the chunks there until
        # the move ends); then one hop to the store's thread.
        descs = await asyncio.gather(*(
            self.transfers.left_peers.call(
                home,
                request_exports(self.worker, home, alloc_id, [c.index for c in group], path, move=True,
                                have=[[c.index, store.replica(alloc_id, c.index).source[1]]
                                      for c in group if c.index in local]),
                lambda home=home, group=group: ChunkLost(
                    f"chunks {[c.index for c in group]} of allocation {alloc_id} were on worker "
                    f"{home}, which left the cluster while they moved to {self.worker.address}"),
            )
            for (home, path), group in groups
        ))
        job = asyncio.ensure_future(self._run(self._fetch_and_promote, alloc_id, owner, chunks,
                                              groups, descs, local, t0))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:  # the chunks it made homes here go again
            pulled, = await asyncio.gather(job, return_exceptions=True)
            if isinstance(pulled, Pulled) and pulled.moved:
                await self._run(self.store.release, alloc_id, pulled.moved)
            raise

    def _fetch_and_promote(self, alloc_id, owner, chunks, groups, descs, local, t0) -> Pulled:
        # In the store's thread. Nothing half-made: a failure gives back what was fetched.
        # The chunks of each home come in batches whose copies are in flight together
        # (``ChunkStore.fetch_many``); the store's lock is let go between two batches.
        fetched: dict[int, tuple] = {}
        current = set()
        try:
            for ((_, path), group), group_descs in zip(groups, descs):
                wanted = []
                for c, desc in zip(group, group_descs):
                    if desc is messages.MOVED:
                        continue  # moved meanwhile: the GVAT keeps the chunk where it is
                    if desc.get("current"):
                        current.add(c.index)  # the replica here is the chunk as it is
                        continue
                    wanted.append((c, desc))
                for batch in _batches(wanted, self.transfers[path].batch_bytes):
                    got = self.store.fetch_many(self.transfers[path], [desc for _, desc in batch])
                    now = time.perf_counter()
                    total = sum(desc["nbytes"] for _, desc in batch) or 1
                    for (c, desc), g in zip(batch, got):
                        if g is None:  # freed or moved after the export: same as MOVED
                            continue
                        handle, copy_s = g
                        fetched[c.index] = (handle, desc["nbytes"], c.version)
                        # (the first batch's time includes the request)
                        self.store.stats.moved(path, desc["nbytes"], (now - t0) * desc["nbytes"] / total, copy_s)
                    t0 = now
        except BaseException as e:
            for handle, n, _ in fetched.values():
                self.store.discard(handle, n)
            if not isinstance(e, MemoryError):
                raise
            raise OutOfDeviceMemory(f"no room on {self.worker.address} for the chunks of "
                                    f"allocation {alloc_id} to move there: {e}") from None
        moved, versions = [], []
        for c in chunks:
            i = c.index
            if i in fetched:
                handle, n, v = fetched[i]
                self.store.promote(alloc_id, owner, i, StoredChunk(handle, n, v))
            elif not (i in current and self.store.promote(alloc_id, owner, i)):
                continue
            moved.append(i)
            versions.append(c.version)
        return Pulled(moved, versions)

    async def ipc_forget(self, holder: WorkerAddress, handles: list | None, timeout: float | None = None) -> int:
        """A peer frees buffers this worker may keep mapped (all of its own when
        ``handles`` is None): close them first."""
        holder = arguments.text("holder", holder)
        if handles is not None:
            arguments.sequence("handles", handles)
        timeout = None if timeout is None else arguments.number("timeout", timeout)
        return await self.transfers.mappings.forget(holder, handles, timeout)

    async def release(self, alloc_id: AllocId, indices: list, ticket: ReleaseTicket):
        """Give up home chunks that moved away (stream message ``messages.RELEASE``, see
        ``scheduler.releases``). Dask reads the stream's next message, a task that may read
        these chunks perhaps, only once this returns. It must not raise: an error in a
        stream handler ends the stream."""
        t0 = time.monotonic()
        try:
            await self._run(self.store.release, alloc_id, indices)
            if time.monotonic() - t0 > SLOW_RELEASE:  # (it holds the worker's stream meanwhile)
                logger.warning("dgvm: releasing chunks %s of allocation %s on %s took %.1f s",
                               indices, alloc_id, self.worker.address, time.monotonic() - t0)
        except Exception:  # noqa: BLE001  (closing: the store's memory goes with it)
            logger.exception("dgvm: releasing chunks %s of allocation %s on %s failed",
                             indices, alloc_id, self.worker.address)
        async with self._releases:
            self._release_done = ticket  # in stream order: tickets only grow
            self._releases.notify_all()

    def written(self, done: dict):
        """Tasks that ran on a worker that left run again here (stream message
        ``messages.WRITTEN``): ``done`` maps each key to the [alloc id, chunk index] pairs
        its first run wrote for good (copies hold them), or to ``messages.ALL_WRITTEN`` (it had
        finished). They write those chunks no more (``ChunkStore.done_writing``)."""
        if self.store is not None:
            for key, chunks in done.items():
                self.store.done_writing[key] = (messages.ALL_WRITTEN if chunks == messages.ALL_WRITTEN
                                                else {(int(a), int(i)) for a, i in chunks})

    async def thaw(self, alloc_id: AllocId, indices: list):
        """A move of these chunks ended without moving them (stream message
        ``messages.THAW``): writes held back for it go on. Must not raise (a stream handler)."""
        try:
            await self._run(self.store.thaw, alloc_id, indices)
        except Exception:  # noqa: BLE001  (closing)
            logger.exception("dgvm: thawing chunks %s of allocation %s on %s failed",
                             indices, alloc_id, self.worker.address)

    async def _after_releases(self, after_release: ReleaseTicket | None, memory: bool = True) -> bool:
        """Wait until the releases sent here up to ticket ``after_release`` are done and
        (``memory``) their memory is back (``scheduler.releases``); False after
        ``RELEASE_WAIT`` seconds. A ticket the scheduler never sent here is refused at once
        (InvalidArgument): it asks the scheduler, only when there is something to wait for."""
        if after_release is None:
            return True
        after_release = arguments.integer("after_release", after_release)
        if self._release_done < after_release:
            sent = await messages.call(self.worker.scheduler, messages.RELEASES_SENT, worker=self.worker.address)
            if sent is None or after_release > sent:
                raise InvalidArgument(
                    f"after_release {after_release}: the scheduler sent no such release to "
                    f"{self.worker.address} (the last it sent: {sent}; done here: {self._release_done})")
        async with self._releases:
            try:
                await asyncio.wait_for(
                    self._releases.wait_for(lambda: self._release_done >= after_release), RELEASE_WAIT
                )
            except asyncio.TimeoutError:
                logger.warning("dgvm: %s waited %.0f s for release %s (done: %s)", self.worker.address,
                               RELEASE_WAIT, after_release, self._release_done)
                return False
        if memory:
            await self._retired()
        return True

    async def drop_replicas(self, alloc_id: AllocId, indices: list, reads: bool = False) -> int:
        """Free the replicas here of chunks ``indices``; ``reads``: read replicas only
        (a write's invalidation: a backup made here since the GVAT booked the read
        replica is refreshed by that write, not dropped)."""
        alloc_id, indices = arguments.integer("alloc_id", alloc_id), arguments.integers("indices", indices)
        reads = arguments.flag("reads", reads)
        # Not waiting for retirement: writes wait for this (and replicas are rarely exported).
        return await self._run(self.store.drop_replicas, alloc_id, indices, reads)

    async def report(self, scheduler: str) -> dict:
        """What the store holds (``ChunkStore.report``), for the GVAT ``scheduler`` (a
        scheduler that restarted, or one this worker came back to)."""
        return await self._run(self._open_store().report, arguments.text("scheduler", scheduler))

    async def info(self, after_release: ReleaseTicket | None = None) -> dict:
        await self._after_releases(after_release)  # the figures after the moves so far
        return {"address": self.worker.address, **self.metrics()}


class _Outliving(dask_compat.SchedulerLossHooks):
    """The store's part when its scheduler goes and comes back (``dask_compat.outlive_scheduler``)."""

    def __init__(self, plugin: ChunkStorePlugin):
        self.plugin = plugin

    def lost(self) -> None:
        p = self.plugin
        p._release_done = -1  # the new scheduler's release tickets start again
        if p.store is not None:
            p._submit(p.store.scheduler_lost)  # (after the store operations queued before it)

    def drained(self) -> None:
        # What the tasks that ran on meanwhile kept (a replica) goes as well.
        p = self.plugin
        if p.store is not None:
            p._submit(p.store.scheduler_lost)

    def back(self) -> None:
        streams.tune(self.plugin.worker.batched_stream)


def _meta(meta) -> dict | None:
    """An ``AllocationMeta`` dict, each field checked (None: not given)."""
    if meta is None:
        return None
    m = arguments.mapping("meta", meta)
    shape = m.get("shape")
    checked = AllocationMeta(
        vaddr=arguments.integer("meta vaddr", m.get("vaddr"), 1),
        nbytes=arguments.integer("meta nbytes", m.get("nbytes"), 1),
        nchunks=arguments.integer("meta nchunks", m.get("nchunks"), 1),
        chunk_bytes=arguments.integer("meta chunk_bytes", m.get("chunk_bytes"), 1),
        placement=arguments.text("meta placement", m.get("placement")),
        created=arguments.number("meta created", m.get("created")),
        copies=arguments.integer("meta copies", m.get("copies", 1), 1),
        dtype=None if m.get("dtype") is None else arguments.dtype_name("meta dtype", m.get("dtype")),
        shape=None if shape is None else tuple(arguments.integers("meta shape", shape)),
        grid_chunks=None if m.get("grid_chunks") is None else tuple(
            tuple(arguments.integers(f"meta grid_chunks[{k}]", axis, 1))
            for k, axis in enumerate(arguments.sequence("meta grid_chunks", m.get("grid_chunks")))),
    )
    return checked.to_dict()


def _pieces(pieces, with_data: bool) -> list:
    """WRITE's pieces ([chunk index, offset, bytes]) or READ's ([chunk index, offset,
    length]), checked: the store checks that they fall inside their chunks."""
    out = []
    for k, p in enumerate(arguments.sequence("pieces", pieces)):
        index, offset, last = arguments.sequence(f"pieces[{k}]", p, 3)
        index = arguments.integer(f"pieces[{k}] chunk index", index)
        offset = arguments.integer(f"pieces[{k}] offset", offset)
        if with_data:
            if not isinstance(last, (bytes, bytearray, memoryview, np.ndarray)):
                raise InvalidArgumentType(f"pieces[{k}] data must be bytes or an array, got {arguments.shown(last)}")
        else:
            last = arguments.integer(f"pieces[{k}] length", last)
        out.append((index, offset, last))
    return out


def _batches(wanted: list, most: int) -> list:
    """``wanted`` ([(PullChunk, descriptor)]) in runs of at most ``most`` bytes (a larger
    chunk alone): the chunks a move copies in one hold of the store's lock."""
    out, size = [], 0
    for item in wanted:
        n = item[1]["nbytes"]
        if not out or size + n > most:
            out.append([])
            size = 0
        out[-1].append(item)
        size += n
    return out


def _pull_chunk(k: int, c) -> PullChunk:
    """One of PULL's ``chunks``, checked."""
    c = arguments.mapping(f"chunks[{k}]", c)
    return PullChunk(
        arguments.integer(f"chunks[{k}] index", c.get("index")),
        arguments.text(f"chunks[{k}] home", c.get("home")),
        arguments.text(f"chunks[{k}] path", c.get("path"), transfer.NAMES),
        arguments.integer(f"chunks[{k}] version", c.get("version")),
    )


class StoreInstaller(WorkerPlugin):
    """What a client registers on a cluster some of whose workers have no chunk store
    (started without the preload): on each worker, now and as workers join, it installs
    a ``ChunkStorePlugin`` where there is none, and leaves one that is there alone.
    Registering the store plugin itself would reach every worker, and Dask replaces a
    plugin of the same name: the store of a worker started with the preload would be torn
    down, chunks and all."""

    name = "dgvm-store-installer"
    idempotent = True

    def __init__(self):
        self.store = ChunkStorePlugin()  # (configured as the registering client's process is)

    async def setup(self, worker):
        # (A store that is there answers as the worker's extension: a plugin whose setup
        # failed is not one. None installed on a worker closing: nothing would close it.)
        if messages.EXTENSION not in worker.extensions and not closing(worker):
            await worker.plugin_add(self.store, name=PLUGIN_NAME, catch_errors=False)


# Dask gives one argument list to every preload of a worker, and ``dask cuda worker`` adds
# its own ``--create-cuda-context``: arguments that are not dgvm's are left to their owners.
@click.command(context_settings=dict(ignore_unknown_options=True))
@click.argument("others", nargs=-1, type=click.UNPROCESSED)
@click.option("--dgvm-backend", default=None, help="auto, cuda or cpu (default: dgvm.backend)")
@click.option("--dgvm-device-memory", default=None, help="device memory to offer, e.g. 4GiB")
@click.option("--dgvm-device-speed", default=None, type=float, help="relative speed (cpu emulation)")
def dask_setup(worker, others, dgvm_backend, dgvm_device_memory, dgvm_device_speed):
    """Preload entry point: ``dask worker ADDR --preload dgvm.worker``. A bad dgvm
    configuration closes the worker (see ``config.check_in_preload``). A worker process its
    nanny started has its collection pauses kept short (``dgvm.gc_pauses``); a worker
    without one may share its process with a program."""
    config.check_in_preload(
        worker,
        {"backend": dgvm_backend, "device-memory": dgvm_device_memory, "device-speed": dgvm_device_speed},
        source="the preload option --dgvm-{key}",
    )
    plugin = ChunkStorePlugin(dgvm_backend, dgvm_device_memory, dgvm_device_speed)
    plugin.setup(worker)
    worker.plugins[plugin.name] = plugin  # so that the worker tears it down on close
    if worker.nanny is not None:
        gc_pauses.shorten()


async def dask_teardown(worker):
    plugin = worker.plugins.pop(PLUGIN_NAME, None)
    if plugin is not None:
        await plugin.teardown(worker)
