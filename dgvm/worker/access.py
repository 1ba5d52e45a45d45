"""Worker side of a launch: get the chunks a kernel needs, local or fetched.

A chunk held here (home or replica) is a hit. Otherwise it is a miss: the GVAT says where
its home is and which transfer path to use, the chunk is copied here once and kept as a
read replica registered in the GVAT, so the next launch that needs it is a hit. A replica
that does not fit, even after evicting replicas this task does not use, is not made: the
chunk is read for the current output chunk only (a transient read).

A task that needs only a small part of a chunk held elsewhere (the halo row of a stencil's
shifted view) reads just the bytes that part spans from the chunk's home, for itself
only, and keeps no copy (``_piece``): a copy of the whole chunk would be fetched again
after every write to it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np
from distributed import get_worker
from distributed.utils import sync

from dgvm.protocol import messages
from dgvm.protocol.errors import ChunkLost, ConnectionBroke, DgvmError, OutOfDeviceMemory, comm_error
from dgvm.protocol.messages import Where
from dgvm.protocol.records import AllocId, ArraySpec  # tasks name their arrays by spec
from dgvm.transfer import Transfers
from dgvm.transfer.fetch import request_exports
from dgvm.transfer.ipc_mappings import BufferGone
from dgvm.worker import direct

# A part of a chunk held elsewhere whose bytes span at most 1/PIECE_SHARE of it is read
# alone (``Access._piece``); a larger one fetches the chunk.
PIECE_SHARE = 4
# A chunk whose read replica here a write made stale is read whole as a piece (``_rewritten``)
# while it is at most this many bytes, up to this many times before its next write.
REWRITTEN_PIECE = 1 << 20
REWRITTEN_READS = 3


@dataclass
class Access:
    """One task's view of this worker's store: chunks by hit, miss or transient read,
    and what it used, for the GVAT (counters, re-homing)."""

    worker: object
    store: object
    transfers: Transfers  # the worker's paths (and the mappings of peers' memory they keep)
    # alloc id -> {"hits", "misses", "home": chunks used at home here, "remote": others}
    reads: dict = field(default_factory=dict)
    # Chunks read without keeping a replica (no room), valid for the current output chunk.
    transient: dict = field(default_factory=dict)
    # (alloc id, index) of the chunks the current output chunk uses: never evicted for it
    current: set = field(default_factory=set)
    # (index, device array) of output chunks whose home moved after the task was placed:
    # ``report`` sends them to the new home.
    forwarded: list = field(default_factory=list)
    # (shape, dtype) -> a scratch buffer for the task's chunks of that shape
    scratches: dict = field(default_factory=dict)
    # Parts of other workers' chunks this task read (``_piece``): (alloc id, index, start,
    # stop) -> bytes.
    pieces: dict = field(default_factory=dict)
    # Piece requests sent ahead (``prefetch``): (alloc id, index, start, stop) -> (future
    # of the home's answer, where the home was).
    asked: dict = field(default_factory=dict)
    pushes: object = None  # pieces homes pushed here (``dgvm.worker.pushes``)
    # Which of them the task may take: task key -> (worker, alloc id, chunk indices) of
    # the tasks of other workers it follows that were the last to write those chunks.
    fresh: dict = field(default_factory=dict)

    @classmethod
    def here(cls) -> "Access":
        """The access of a task running on this worker."""
        task = direct.running()  # a task of the direct plane, or Dask's
        w = task[0] if task is not None else get_worker()
        plugin = w.plugins.get(messages.STORE_PLUGIN)
        if plugin is None:
            raise DgvmError(f"worker {w.address} has no dgvm chunk store (start it with "
                            "--preload dgvm.worker, or connect with dgvm.connect)")
        return cls(w, plugin.store, plugin.transfers, pushes=plugin.pushes,
                   fresh=task[3] if task is not None else {})

    def ask_scheduler(self, handler: str, **kwargs):
        """Call the GVAT's ``handler`` from the task's thread; its answer decoded
        (``messages.call``: a refusal raised)."""
        return sync(self.worker.loop, messages.call, self.worker.scheduler, handler, **kwargs)

    def scratch(self, shape, dtype):
        """A scratch buffer of this shape and dtype, the same one for every chunk of the
        task: Dask workers give freed memory past 64 KiB back to the OS
        (MALLOC_TRIM_THRESHOLD_), so a fresh buffer per chunk faulted its pages in again."""
        key = (tuple(shape), np.dtype(dtype).str)
        buf = self.scratches.get(key)
        if buf is None:
            buf = self.scratches[key] = self.store.backend.xp.empty(key[0], dtype=dtype)
        return buf

    def put_result(self, out: "ArraySpec", index: int, target, value) -> None:
        """Store an output chunk's new value: in place at its home, or, when the home
        moved after this task was placed, as a copy that ``report`` forwards there."""
        if self.store.is_home(out.alloc_id, index):
            target[...] = value
            return
        moved = self.store.backend.xp.empty(target.shape, dtype=target.dtype)
        moved[...] = value
        self.forwarded.append((index, moved))

    @contextlib.contextmanager
    def output_chunk(self):
        """Scope of one output chunk: the store is locked (a kernel, a copy and a free of
        this device's memory never overlap) and its transient reads end with it."""
        self.transient.clear()
        self.current.clear()
        with self.store.lock:
            yield

    def _count(self, alloc_id: int) -> dict:
        r = self.reads.get(alloc_id)
        if r is None:
            r = self.reads[alloc_id] = {"hits": 0, "misses": 0, "home": set(), "remote": set()}
        return r

    def chunk(self, spec: ArraySpec, index: int):
        """Chunk ``index`` of ``spec`` as a typed, shaped array of the backend's kind."""
        count = self._count(spec.alloc_id)
        key = (spec.alloc_id, index)
        self.current.add(key)
        store = self.store
        held = store.local(spec.alloc_id, index)
        if held is not None and store.leaving(spec.alloc_id, index) and self._moved_away(spec.alloc_id, index):
            held = None  # read from its new home for this output chunk (``transient``)
        shape = spec.block_shape(spec.block(index))
        piece = None
        if held is not None or key in self.transient:
            count["hits"] += 1
            store.stats.hits += 1
        else:
            piece = self._rewritten(spec, index, shape)  # (counted as a miss there)
            if piece is None:
                count["misses"] += 1
                store.stats.misses += 1
                self._fetch(spec.alloc_id, index)
                held = store.local(spec.alloc_id, index)
        if store.is_home(spec.alloc_id, index):
            count["home"].add(index)
        else:
            count["remote"].add(index)
        if piece is not None:
            return piece
        if held is not None:
            held.last_use = time.monotonic()
            return held.typed(store.backend, spec.dtype, shape)
        return self.transient[key].view(spec.dtype).reshape(shape)

    def _rewritten(self, spec: ArraySpec, index: int, shape: tuple):
        """Chunk ``index`` of ``spec`` read whole as a piece, for this task only, when a
        write made this worker's read replica of it stale (``ChunkStore.rewritten``) and
        it is at most ``REWRITTEN_PIECE`` bytes; else None. A chunk written between two
        reads here (a solver's vectors, each step) would be copied, registered in the GVAT
        and dropped again every time: as a piece it is one request to its home (known
        from the last one, ``Transfers.homes``) and no copy that a write must reach. Past
        ``REWRITTEN_READS`` such reads before its next write, it is copied again as a
        replica, which serves the reads after it without a request (the home's write count,
        sent with each piece, tells a write since the last one)."""
        key = (spec.alloc_id, index)
        store = self.store
        nbytes = _nbytes(spec, shape)
        if _covering(self.pieces, *key, 0, nbytes) is None and self._mark(key, nbytes) is None:
            with store.lock:  # (past its reads as a piece, a replica from now on)
                store.rewritten.pop(key, None)
            return None
        got = self._task_piece(*key, 0, nbytes, store.backend.xp)
        if got is None:  # its home is here now
            return None
        buf, writes = got
        if writes is not None:  # read now: one read per task, counted anew after a write
            with store.lock:
                mark = store.rewritten.get(key)
                if mark is not None:
                    mark[0] = 1 if mark[1] is not None and writes != mark[1] else mark[0] + 1
                    mark[1] = writes
        return buf.view(spec.dtype).reshape(shape)

    def _mark(self, key: tuple, nbytes: int):
        """The ``ChunkStore.rewritten`` mark of chunk ``key`` while ``_rewritten`` reads it
        whole as a piece (at most ``REWRITTEN_PIECE`` bytes, fewer than ``REWRITTEN_READS``
        reads since its last write), else None."""
        mark = self.store.rewritten.get(key)
        if mark is None or mark[0] >= REWRITTEN_READS or not 0 < nbytes <= REWRITTEN_PIECE:
            return None
        return mark

    def _rewritten_span(self, spec: ArraySpec, index: int):
        """(0, 0, its bytes) of chunk ``index`` when ``_rewritten`` would read it whole as
        a piece now (for ``prefetch``, which counts no read), else None."""
        key = (spec.alloc_id, index)
        if self.store.local(*key) is not None or key in self.transient:
            return None
        nbytes = _nbytes(spec, spec.block_shape(spec.block(index)))
        return None if self._mark(key, nbytes) is None else (0, 0, nbytes)

    def locate(self, alloc_id: AllocId, index: int) -> Where:
        """The GVAT's answer for a chunk this worker needs: its home, path, version
        (ChunkLost if its home left, InvalidAddress if the allocation is gone)."""
        return self.ask_scheduler(messages.LOCATE, alloc_id=alloc_id, index=index,
                                  worker=self.worker.address)

    def _export(self, where: Where, path, alloc_id: int, index: int, doing: str, span=None):
        """Chunk ``index``'s descriptor from its home ``where.home`` for ``path`` (or
        ``MOVED``; only bytes ``span`` of it, if given); ``ChunkLost`` if the home leaves
        meanwhile."""
        desc, = sync(self.worker.loop, self._export_request, where, path.name, alloc_id, index, doing, span)
        return desc

    async def _export_request(self, where: Where, path: str, alloc_id: int, index: int, doing: str, span=None):
        """The request ``_export`` waits for (a coroutine, run on the worker's loop). A
        connection that broke without news that the home left is a ``ConnectionBroke``
        naming the chunk: a task that reads it fails with that, not with a raw comm error
        (a kernel's own ``OSError`` stays the kernel's)."""
        w = self.worker
        try:
            return await self.transfers.left_peers.call(
                where.home, request_exports(w, where.home, alloc_id, [index], path, span=span),
                lambda: ChunkLost(f"chunk {index} of allocation {alloc_id} was on worker {where.home}, "
                                  f"which left the cluster while {w.address} {doing} it"))
        except OSError as e:
            if not comm_error(e):
                raise
            raise ConnectionBroke(f"{w.address} asking {where.home} for chunk {index} of allocation "
                                  f"{alloc_id}: the connection broke: {type(e).__name__}: {e}") from None

    def _moved_away(self, alloc_id: int, index: int) -> bool:
        """A move is taking home chunk ``index`` away from here (frozen until its release
        or thaw). While the GVAT names this worker its home, the copy here holds what the
        move copies; once it names the new home, a write may have followed there, and the
        release here need not have come before this task (a task of the direct plane
        does not follow the scheduler's stream): read the new home's copy, for the
        current output chunk only. True if it was read so. (No wait for the move: the
        store's lock stays held, so no move freezes the output chunk meanwhile.)"""
        w = self.worker
        for _ in range(8):
            where = self.locate(alloc_id, index)
            if where.home == w.address:
                return False
            path = self.transfers[where.path]
            try:
                desc = self._export(where, path, alloc_id, index, "read")
                if desc is messages.MOVED:
                    continue
                self._fetch_transient(alloc_id, index, path, desc)
            except (ChunkLost, BufferGone):
                continue
            if self._same(where, self.locate(alloc_id, index)):
                return True
            self.transient.pop((alloc_id, index), None)
        raise DgvmError(f"chunk {index} of allocation {alloc_id} kept moving while {w.address} read it")

    def _fetch(self, alloc_id: int, index: int) -> None:
        """A miss: copy the chunk here from its home, as a replica registered in the GVAT;
        with no room even after evicting unused replicas, as a transient read."""
        w = self.worker
        # The home may move, free the buffer or write the chunk between locate, export and
        # copy: the GVAT checks the copy's source and version before it counts; ask again.
        for _ in range(8):
            where = self.locate(alloc_id, index)
            if where.home == w.address and self.store.local(alloc_id, index) is not None:
                return  # its home moved here meanwhile
            path = self.transfers[where.path]
            t0 = time.perf_counter()
            try:
                desc = self._export(where, path, alloc_id, index, "fetched")
            except ChunkLost:
                continue  # the GVAT names a copy that took over, or says the chunk is lost
            if desc is messages.MOVED:
                continue
            n = desc["nbytes"]
            try:
                handle, copy_s = self._fetch_replica(path, desc)
            except BufferGone:
                continue
            except MemoryError:
                try:
                    copy_s = self._fetch_transient(alloc_id, index, path, desc)
                except BufferGone:
                    continue
                if not self._same(where, self.locate(alloc_id, index)):
                    continue
                self.store.stats.moved(path.name, n, time.perf_counter() - t0, copy_s)
                return
            seconds = time.perf_counter() - t0
            self.store.add_replica(alloc_id, index, handle, n, where.version,
                                   source=(where.home, desc.get("writes")))
            kept = self.ask_scheduler(
                messages.REPLICA_ADDED, alloc_id=alloc_id, index=index,
                worker=w.address, nbytes=n, path=path.name, seconds=seconds,
                source=where.home, version=where.version,
            )
            if kept == messages.KEPT:
                self.store.stats.moved(path.name, n, seconds, copy_s)
                return
            self.store.drop_replicas(alloc_id, [index], reads=True)
            if kept != messages.STALE:
                raise DgvmError(f"allocation {alloc_id} was freed while chunk {index} was fetched")
        raise DgvmError(f"chunk {index} of allocation {alloc_id} kept moving while fetched")

    def _piece(self, spec: ArraySpec, index: int, sel: tuple, xp):
        """Elements ``sel`` (a slice of step 1 per axis) of chunk ``index`` of ``spec``,
        read from its home for this task only, when this worker holds no copy of the chunk
        and their bytes span at most 1/``PIECE_SHARE`` of it; else None (read the chunk).

        The home reads the bytes and sends them (the comm path's export with a span), so
        they are its chunk's as it holds it when asked: no buffer of it is mapped here,
        which a move or a free could reuse meanwhile. The task's tasks before it wrote
        what it reads (the caller orders them). Pieces and homes are kept for the task."""
        alloc_id = spec.alloc_id
        span = self._piece_span(spec, index, sel)
        if span is None:
            return None
        first, start, stop = span
        shape = spec.block_shape(spec.block(index))
        itemsize = np.dtype(spec.dtype).itemsize
        got = self._task_piece(alloc_id, index, start, stop, xp)
        if got is None:
            return None
        dst = got[0][first - start:]
        strides, step = [], itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
        return xp.lib.stride_tricks.as_strided(
            dst.view(spec.dtype), shape=tuple(s.stop - s.start for s in sel), strides=tuple(strides))

    def _piece_span(self, spec: ArraySpec, index: int, sel: tuple):
        """(first byte, start, stop) of the piece ``_piece`` reads for ``sel`` of chunk
        ``index``: whole rows (every element after the first axis: the shifted leaves of a
        stencil read overlapping parts of the same rows, which one piece then holds), or
        the bytes of ``sel`` alone where whole rows are too many; None when the chunk is
        here, ``sel`` is empty or its bytes span more than
        1/``PIECE_SHARE`` of the chunk."""
        alloc_id = spec.alloc_id
        if not sel or self.store.local(alloc_id, index) is not None or (alloc_id, index) in self.transient:
            return None
        if any(s.stop <= s.start for s in sel):
            return None
        shape = spec.block_shape(spec.block(index))
        itemsize = np.dtype(spec.dtype).itemsize
        first = int(np.ravel_multi_index([s.start for s in sel], shape)) * itemsize
        last = (int(np.ravel_multi_index([s.stop - 1 for s in sel], shape)) + 1) * itemsize
        start = int(np.ravel_multi_index([sel[0].start] + [0] * (len(shape) - 1), shape)) * itemsize
        stop = int(np.ravel_multi_index([sel[0].stop - 1] + [n - 1 for n in shape[1:]], shape) + 1) * itemsize
        whole = itemsize * int(np.prod(shape))
        if (stop - start) * PIECE_SHARE > whole:
            start, stop = first, last  # (a chunk of few rows: the bytes asked for only)
            if (stop - start) * PIECE_SHARE > whole:
                return None
        return first, start, stop

    def prefetch(self, spec: ArraySpec, lo, hi) -> None:
        """Send now, without waiting, the request for the piece a later ``read(spec, lo,
        hi)`` of this task reads from another worker's chunk (a part of it, or all of a
        chunk ``_rewritten`` reads whole), if it reads one whose home this worker knows
        (``Transfers.homes``): the requests of a task's parts and leaves travel together
        while its first part runs, and ``_read_piece`` takes the answer."""
        within = self._within_one(spec, lo, hi)
        if within is None:
            return
        index, sel, whole = within
        span = self._rewritten_span(spec, index) if whole else self._piece_span(spec, index, sel)
        if span is None:
            return
        _, start, stop = span
        alloc_id = spec.alloc_id
        if _covering(self.pieces, alloc_id, index, start, stop) or _covering(self.asked, alloc_id, index, start, stop):
            return
        where = self.transfers.homes.get((alloc_id, index))
        if where is None or where.home == self.worker.address:
            return
        if self.pushes is not None and self.pushes.usable(alloc_id, index, start, stop, self.fresh):
            return  # (pushed here already: ``_read_piece`` takes it)
        request = self._export_request(where, "comm", alloc_id, index, "read", span=[start, stop])
        self.asked[(alloc_id, index, start, stop)] = (
            asyncio.run_coroutine_threadsafe(request, self.worker.loop.asyncio_loop), where)

    def _read_piece(self, alloc_id: int, index: int, start: int, stop: int, xp):
        """Bytes ``[start, stop)`` of chunk ``index`` from its home, as a new 1-D uint8
        array of ``xp``, and the home's write count of the chunk then; None if its home
        is (now) this worker."""
        w, key = self.worker, (alloc_id, index)
        path = self.transfers["comm"]
        t0 = time.perf_counter()
        where = self.transfers.homes.get(key)  # (the home answers MOVED if it is not any more)
        asked = self.asked.pop((alloc_id, index, start, stop), None)
        desc = None if self.pushes is None else self.pushes.take(alloc_id, index, start, stop, self.fresh)
        if desc is not None:  # its home sent it as the task it follows wrote it
            self.store.stats.pushed += 1
            return self._piece_from(xp, path, desc, alloc_id, index, start, stop, "its home", t0)
        for _ in range(8):
            if asked is not None:  # sent ahead (``prefetch``)
                future, where = asked
                asked = None
                self.store.stats.ahead += 1
                try:
                    desc, = future.result()
                except ChunkLost:
                    desc = messages.MOVED
            else:
                if where is None:
                    where = self.locate(alloc_id, index)
                if where.home == w.address:
                    return None  # its home moved here meanwhile
                try:
                    desc = self._export(where, path, alloc_id, index, "read", span=[start, stop])
                except ChunkLost:
                    desc = messages.MOVED  # the GVAT names a copy that took over, or says it is lost
            if desc is messages.MOVED:
                where = None
                continue
            if desc.get("leaving"):
                # A move is copying it away: its bytes are the home's last, unless the GVAT
                # names the new home already (a write may have followed there: read that).
                now = self.locate(alloc_id, index)
                if now.home != where.home:
                    where = now
                    continue
            break
        else:
            raise DgvmError(f"chunk {index} of allocation {alloc_id} kept moving while {w.address} read it")
        self.transfers.home_seen(key, where)
        return self._piece_from(xp, path, desc, alloc_id, index, start, stop, where.home, t0)

    def _piece_from(self, xp, path, desc, alloc_id: int, index: int, start: int, stop: int, home: str, t0: float):
        """Bytes ``[start, stop)`` of that chunk, from its home's descriptor ``desc``, in a
        new ``xp`` array, counted as a remote read since ``t0``; and the home's write
        count of the chunk then."""
        try:
            dst = xp.empty(stop - start, dtype=np.uint8)
        except MemoryError as e:  # also CuPy's OutOfMemoryError
            backend = self.store.backend
            raise OutOfDeviceMemory(
                f"no room on {self.worker.address} for {stop - start} bytes of chunk {index} of allocation "
                f"{alloc_id} read from {home}: {backend.free} of {backend.capacity} bytes free "
                f"({e})") from None
        copy_s = path.fetch_into(desc, dst, start)
        self._count(alloc_id)["misses"] += 1
        self.store.stats.misses += 1
        self.store.stats.transient += 1
        self.store.stats.moved(path.name, stop - start, time.perf_counter() - t0, copy_s)
        return dst, desc.get("writes")

    def _task_piece(self, alloc_id: int, index: int, start: int, stop: int, xp):
        """Bytes ``[start, stop)`` of chunk ``index`` (a 1-D uint8 array): of a piece this
        task read before, or read now from its home and kept for the task, with the home's
        write count then (None for a piece held); None if its home is here now."""
        held = _covering(self.pieces, alloc_id, index, start, stop)
        if held is not None:
            return self.pieces[held][start - held[2]:stop - held[2]], None
        got = self._read_piece(alloc_id, index, start, stop, xp)
        if got is not None:
            self.pieces[(alloc_id, index, start, stop)] = got[0]
        return got

    @staticmethod
    def _same(before: Where, after: Where) -> bool:
        return before.home == after.home and before.version == after.version

    def _fetch_replica(self, path, desc):
        store = self.store
        try:
            return store.fetch(path, desc)
        except MemoryError:
            pass
        # No room: drop replicas this task is not using (least recently used first).
        dropped = store.evict(desc["nbytes"], keep=self.current)
        if not dropped:
            raise MemoryError
        self.ask_scheduler(messages.REPLICAS_DROPPED, worker=self.worker.address,
                           dropped={str(a): v for a, v in dropped.items()})
        return store.fetch(path, desc)

    def _fetch_transient(self, alloc_id, index, path, desc) -> float:
        """Read the chunk for the current output chunk only, keeping no replica."""
        backend = self.store.backend
        try:
            dst = backend.xp.empty(desc["nbytes"], dtype=np.uint8)
            copy_s = path.fetch_into(desc, dst)
        except MemoryError as e:  # also CuPy's OutOfMemoryError
            raise OutOfDeviceMemory(
                f"no room on {self.worker.address} for chunk {index} of allocation {alloc_id} "
                f"({desc['nbytes']} bytes), not even for one transient read: "
                f"{backend.free} of {backend.capacity} bytes free ({e})"
            ) from None
        self.transient[(alloc_id, index)] = dst
        self.store.stats.transient += 1
        return copy_s

    def with_halo(self, spec: ArraySpec, block: tuple, halo: int, xp):
        """Block ``block`` of ``spec`` extended by up to ``halo`` cells on every side from
        its neighbours (clipped at the array's edge), as a new array."""
        lo, hi = spec.bounds(spec.index(block))
        lo = [max(0, v - halo) for v in lo]
        hi = [min(n, v + halo) for n, v in zip(spec.shape, hi)]
        return self.region(spec, lo, hi, xp)

    def blocks(self, spec: ArraySpec, select: tuple, xp):
        """The blocks ``select`` of ``spec`` (per axis: a block index or a slice of them)
        as one array: a view of the chunk for a single block, else a new array."""
        if len(select) != len(spec.grid):
            raise ValueError(
                f"the block selection {select} has {len(select)} axes; the array has {len(spec.grid)}"
            )
        spans = []
        for a, sel in enumerate(select):
            n = spec.grid[a]
            r = range(n)[sel] if isinstance(sel, slice) else range(n)[int(sel)]
            r = r if isinstance(r, range) else range(r, r + 1)
            if len(r) == 0 or r.step != 1:
                raise ValueError(f"block selection {sel!r} on axis {a} (of {n} blocks) is empty or strided")
            spans.append(r)
        if all(len(r) == 1 for r in spans):
            return self.chunk(spec, spec.index([r[0] for r in spans]))
        lo = [spec.edges(a)[r[0]] for a, r in enumerate(spans)]
        hi = [spec.edges(a)[r[-1] + 1] for a, r in enumerate(spans)]
        return self.region(spec, lo, hi, xp)

    def read(self, spec: ArraySpec, lo, hi, xp):
        """Elements ``[lo, hi)`` of ``spec`` for reading: a view when one chunk holds
        them all, else a new array gathered from the chunks (see ``region``)."""
        within = self._within_one(spec, lo, hi)
        if within is None:
            return self.region(spec, lo, hi, xp)
        index, sel, whole = within
        if whole:
            return self.chunk(spec, index)  # (the common case: inputs chunked as the output)
        piece = self._piece(spec, index, sel, xp)
        return piece if piece is not None else self.chunk(spec, index)[sel]

    def _within_one(self, spec: ArraySpec, lo, hi):
        """(chunk index, its slices, whether they are all of it) when one chunk of ``spec``
        holds elements ``[lo, hi)``, else None."""
        ranges = self._block_ranges(spec, lo, hi)
        if not all(len(r) == 1 for r in ranges):
            return None
        nb = [r[0] for r in ranges]
        st = [spec.edges(a)[b] for a, b in enumerate(nb)]
        whole = all(l == s for l, s in zip(lo, st)) and all(h == spec.edges(a)[b + 1] for a, (h, b) in enumerate(zip(hi, nb)))
        return spec.index(nb), tuple(slice(l - s, h - s) for l, h, s in zip(lo, hi, st)), whole

    @staticmethod
    def _block_ranges(spec: ArraySpec, lo, hi) -> list[range]:
        """Per axis, the blocks that overlap ``[lo, hi)``."""
        ranges = []
        for a in range(len(lo)):
            edges = spec.edges(a)
            first = bisect.bisect_right(edges, lo[a]) - 1
            last = max(first, bisect.bisect_left(edges, hi[a]) - 1)
            ranges.append(range(first, last + 1))
        return ranges

    def region(self, spec: ArraySpec, lo, hi, xp):
        """Elements ``[lo, hi)`` (per axis) of ``spec``, gathered from the chunks that hold
        them (local, replicas or fetched) into a new array."""
        out = xp.empty(tuple(h - l for l, h in zip(lo, hi)), dtype=spec.dtype)
        self.store.stats.gathered += 1
        for nb in itertools.product(*self._block_ranges(spec, lo, hi)):
            if any(lo[a] >= hi[a] for a in range(len(lo))):
                break  # an empty region
            dst_sl, src_sl = [], []
            for a, b in enumerate(nb):
                edges = spec.edges(a)
                s0, s1 = max(lo[a], edges[b]), min(hi[a], edges[b + 1])
                dst_sl.append(slice(s0 - lo[a], s1 - lo[a]))
                src_sl.append(slice(s0 - edges[b], s1 - edges[b]))
            piece = self._piece(spec, spec.index(nb), tuple(src_sl), xp)
            out[tuple(dst_sl)] = piece if piece is not None else self.chunk(spec, spec.index(nb))[tuple(src_sl)]
        return out


def _nbytes(spec: ArraySpec, shape: tuple) -> int:
    return math.prod(shape) * np.dtype(spec.dtype).itemsize


def _covering(table: dict, alloc_id: int, index: int, start: int, stop: int):
    """The key of ``table`` ((alloc id, index, start, stop) each) whose bytes hold
    ``[start, stop)`` of that chunk, or None."""
    return next((k for k in table if k[:2] == (alloc_id, index) and k[2] <= start and stop <= k[3]), None)
