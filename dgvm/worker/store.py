"""A worker's chunk store: the device buffers of the chunks homed on this worker.

Every request is checked before memory is touched: the chunk must be known here, the
caller must own its allocation, and offsets must fall inside the chunk.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dask.utils import format_bytes

from dgvm.backends import Backend
from dgvm.protocol.errors import AccessDenied, DgvmError, InvalidAddress, OutOfDeviceMemory

# How long a write waits for a move of its chunk to end (the move's copy takes
# milliseconds; its end is a message from the scheduler, which always sends one).
MOVE_WAIT = 60.0
REWRITTEN_KEPT = 4096  # chunks a worker remembers its stale read replicas of

logger = logging.getLogger("dgvm.worker")


@dataclass
class StoredChunk:
    handle: Any
    nbytes: int
    version: int = 0
    last_use: float = 0.0  # time.monotonic() of the last read (replicas: for eviction)
    # (dtype, shape) -> the chunk as an array of that type: tasks read a chunk as the same
    # typed array again and again, and a CuPy view costs several microseconds to make.
    views: dict = field(default_factory=dict, repr=False, compare=False)
    # A replica: (home address, the home's write count of the chunk) when it was copied.
    source: tuple | None = None
    # A backup (``replicas=k``): a replica every write refreshes, never evicted.
    durable: bool = False

    def typed(self, backend, dtype: str, shape: tuple):
        """The chunk's bytes as an array of ``dtype`` and ``shape`` (made once)."""
        key = (dtype, shape)
        view = self.views.get(key)
        if view is None:
            view = self.views[key] = backend.view(self.handle, self.nbytes).view(dtype).reshape(shape)
        return view


class ChunkLeaving(Exception):
    """A write found its chunk in the middle of a move (``ChunkStore.wait_writable``)."""

    def __init__(self, alloc_id: int, index: int):
        super().__init__(alloc_id, index)
        self.alloc_id, self.index = alloc_id, index


def _locked(method):
    """Store operations never overlap: a kernel, a copy and a free of one worker's
    device memory happen one after another."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper


class ChunkStore:
    def __init__(self, backend: Backend, address: str = ""):
        self.lock = threading.RLock()
        self.backend = backend
        self.address = address
        self._allocs: dict[int, dict[int, StoredChunk]] = {}
        self._owners: dict[int, str] = {}
        # Read-only copies of chunks homed elsewhere: alloc id -> chunk index -> chunk.
        # The GVAT drops them (drop_replicas) before a write to the chunk completes.
        self._replicas: dict[int, dict[int, StoredChunk]] = {}
        # Chunks whose read replica here a write made stale: (alloc id, index) -> [whole-chunk
        # pieces read since its last write, the home's write count at the last one]
        # (``dgvm.worker.access``, ``Access._rewritten``); the oldest forgotten past
        # ``REWRITTEN_KEPT``.
        self.rewritten: "collections.OrderedDict[tuple, list]" = collections.OrderedDict()
        # Copies that all-or-nothing launches wrote, until their commit (dgvm.worker.kernel_tasks):
        # launch id -> (alloc id of the output, {chunk index: new value}).
        self._staged: dict[str, tuple[int, dict]] = {}
        self.stats = StoreStats()
        # Coherence under moves (docs/architecture.md, "Coherence"): home chunks a move is
        # copying away ("leaving"), which no write here may change until the move ends,
        # and how many times each home chunk here was written or arrived.
        self.changed = threading.Condition(self.lock)
        self._leaving: set[tuple[int, int]] = set()
        self._writes: dict[tuple[int, int], int] = {}
        self._write_events: dict[tuple[int, int], object] = {}  # (alloc id, index) -> ``last_write``
        # Home chunks other workers may hold copies of (alloc id -> {chunk index: mark}):
        # exported (a replica, a backup, a move), or homes here since a move or promotion.
        # A write to one of them is answered only once the GVAT dropped or refreshed those
        # copies (``dgvm.worker.direct``); a write to any other chunk need not wait for that.
        # Each mark is the number of the export that made it (``shared``), so that the
        # GVAT's answer to such a write clears the marks of the exports before it
        # (``copies_dropped``), not those of exports since.
        self._shared: dict[int, dict[int, int]] = {}
        self._exports = 0  # marks made so far (``shared``)
        self._shared_lock = threading.Lock()  # (exports mark outside the store's lock)
        # Tasks run again here after their worker left: key -> the (alloc id, chunk index)
        # their first run wrote for good (copies hold it), or messages.ALL_WRITTEN.
        self.done_writing: dict[str, object] = {}
        # What a scheduler that restarts needs besides the chunks (``report``): alloc id ->
        # its AllocationMeta as a dict, and the highest id and address end ever given here.
        self._meta: dict[int, dict] = {}
        self.max_alloc_id = 0
        self.max_vaddr_end = 0
        self.scheduler = ""  # the GVAT that last gave this store an allocation or its report

    # -- for a scheduler that restarts ---------------------------------------------------
    def remember(self, alloc_id: int, meta: dict | None) -> None:
        """Keep ``meta`` (an ``AllocationMeta`` dict) of an allocation held here. One dict
        operation: the handlers call it on the loop, beside the store's thread."""
        if meta is None:
            return
        self._meta[alloc_id] = meta
        self.scheduler = meta.get("scheduler") or self.scheduler
        self.max_alloc_id = max(self.max_alloc_id, alloc_id)
        self.max_vaddr_end = max(self.max_vaddr_end, int(meta["vaddr"]) + int(meta["nbytes"]))

    def _forget_if_empty(self, alloc_id: int) -> None:
        if alloc_id not in self._allocs and alloc_id not in self._replicas:
            self._meta.pop(alloc_id, None)
            self._owners.pop(alloc_id, None)

    @_locked
    def scheduler_lost(self) -> None:
        """The scheduler is gone; a new one knows only what ``report`` tells it. Read
        replicas go (it will not know them, so no write would drop them); moves and
        staged launches the old one started never end: their chunks are writable again
        and their copies dropped; tasks run again are forgotten."""
        for alloc_id in list(self._replicas):
            self.drop_replicas(alloc_id, [i for i, c in self._replicas[alloc_id].items() if not c.durable])
            self._forget_if_empty(alloc_id)
        self._staged.clear()  # (arrays of the backend's kind: their memory goes with them)
        self._leaving.clear()
        self.done_writing.clear()
        self.changed.notify_all()

    @_locked
    def report(self, scheduler: str) -> dict:
        """What this store holds, for a new scheduler (``messages.STORE_REPORT``): per
        allocation its owner, meta (None if never told), home chunks [index, bytes, write
        count] and backups [index, bytes, source home, its write count then]; and the
        highest allocation id and virtual address end ever given here. The GVAT
        ``scheduler`` asks: what it is told of is its own from now on."""
        allocs = []
        for alloc_id in sorted({*self._allocs, *self._replicas}):
            homes = self._allocs.get(alloc_id, {})
            backups = {i: c for i, c in self._replicas.get(alloc_id, {}).items() if c.durable}
            if not homes and not backups:
                continue
            allocs.append({
                "alloc_id": alloc_id, "owner": self._owners.get(alloc_id), "meta": dict(self._meta.get(alloc_id) or {}) or None,
                "homes": [[i, c.nbytes, self._writes.get((alloc_id, i), 0)] for i, c in sorted(homes.items())],
                "backups": [[i, c.nbytes, *(c.source or (None, -1))] for i, c in sorted(backups.items())],
            })
        self.scheduler = scheduler
        for meta in list(self._meta.values()):  # (copies in the answer, ``allocs`` above;
            # a list: ``remember`` adds to it on the event loop meanwhile)
            meta["scheduler"] = scheduler
        return {"allocations": allocs, "max_alloc_id": self.max_alloc_id,
                "max_vaddr_end": self.max_vaddr_end}

    # -- life cycle ----------------------------------------------------------------------
    @_locked
    def allocate(self, alloc_id: int, owner: str, indices: list[int], sizes: list[int],
                 zero: bool = True, backups: list[int] = (), backup_sizes: list[int] = ()) -> int:
        """Create the given chunks of ``alloc_id``, and backups of chunks ``backups``
        homed elsewhere (``replicas=k``), zero-filled unless ``zero=False`` (the caller
        writes every byte before anyone reads); all or nothing."""
        if alloc_id in self._allocs or alloc_id in self._replicas:
            raise InvalidAddress(f"allocation {alloc_id} already has chunks on {self.address}")
        made: dict[int, StoredChunk] = {}
        kept: dict[int, StoredChunk] = {}
        free = self.backend.free  # once per request, not per chunk
        try:
            for table, idx, nbytes in ((made, indices, sizes), (kept, backups, backup_sizes)):
                for i, n in zip(idx, nbytes):
                    table[i] = StoredChunk(self.backend.allocate(int(n), zero, free), int(n),
                                           durable=table is kept)
                    free -= self.backend.footprint(int(n))
        except MemoryError as e:
            for c in (*made.values(), *kept.values()):
                self._release(c)
            raise OutOfDeviceMemory(
                f"worker {self.address} ({self.backend.name}) could not allocate "
                f"{format_bytes(sum(sizes) + sum(backup_sizes))} for allocation {alloc_id}: "
                f"{format_bytes(self.backend.free)} of {format_bytes(self.backend.capacity)} "
                f"free ({e})"
            ) from None
        if made:
            self._allocs[alloc_id] = made
        if kept:
            self._replicas[alloc_id] = kept
        self._owners[alloc_id] = owner
        return sum(c.nbytes for c in (*made.values(), *kept.values()))

    @_locked
    def refresh(self, alloc_id: int, owner: str, index: int, path, desc: dict, version: int,
                source: tuple, new: bool = False) -> None:
        """Make the backup of chunk ``index`` a copy of its home's (``desc``, exported
        there after a write), at the GVAT's ``version``: copied into the backup's buffer,
        or into a new one when this worker has none yet. A refresh older than the one the
        backup holds is passed over (two writes' refreshes may arrive out of order)."""
        if self.is_home(alloc_id, index):
            return  # it moved here, or a promotion made it home: the home holds its own data
        c = self._replicas.get(alloc_id, {}).get(index)
        if c is None and not new:
            return  # the backup was dropped, or its allocation freed, meanwhile
        held = self._replicas.setdefault(alloc_id, {})
        if c is not None and c.version > version:
            c.durable = c.durable or new  # (a read replica of a later write: the backup now)
            return
        if c is None or c.nbytes != desc["nbytes"]:
            if c is not None:
                self._release(held.pop(index))
            handle, _ = path.fetch(desc, self.backend)
            c = held[index] = StoredChunk(handle, int(desc["nbytes"]), durable=True)
        else:
            c.durable = True  # (also a read replica held here: it becomes the backup)
            # The buffer's own queued work first (cuda: its zero-fill runs on the backend's
            # stream, which the copy's stream does not wait for).
            self.backend.synchronize()
            path.fetch_into(desc, self.backend.view(c.handle, c.nbytes))
        c.version, c.source, c.last_use = int(version), source, time.monotonic()
        self._owners.setdefault(alloc_id, owner)

    @_locked
    def fetch(self, path, desc: dict):
        """A new buffer holding a peer's chunk (``path.fetch``): (handle, copy seconds).
        Under the store lock, as every allocation of this device's memory."""
        return path.fetch(desc, self.backend)

    @_locked
    def fetch_many(self, path, descs: list) -> list:
        """New buffers holding peers' chunks, their copies in flight together
        (``path.fetch_many``): per descriptor (handle, copy seconds), or None for a buffer
        its holder freed after the export. Under the store lock, as ``fetch``."""
        return path.fetch_many(descs, self.backend)

    @_locked
    def discard(self, handle, nbytes: int) -> None:
        """Give back a buffer ``fetch`` made that was not kept."""
        self.backend.release(handle, nbytes)

    @_locked
    def free(self, alloc_id: int) -> int:
        """Release every chunk and replica of ``alloc_id`` held here; return the bytes."""
        chunks = self._allocs.pop(alloc_id, None) or {}
        self._owners.pop(alloc_id, None)
        self._meta.pop(alloc_id, None)
        replicas = self._replicas.pop(alloc_id, None) or {}
        for c in (*chunks.values(), *replicas.values()):
            self._release(c)
        # Launches into it that have not committed never will.
        for launch in [k for k, (a, _) in self._staged.items() if a == alloc_id]:
            del self._staged[launch]
        self._leaving = {key for key in self._leaving if key[0] != alloc_id}
        self._writes = {key: n for key, n in self._writes.items() if key[0] != alloc_id}
        self._write_events = {key: e for key, e in self._write_events.items() if key[0] != alloc_id}
        with self._shared_lock:
            self._shared.pop(alloc_id, None)
        self.changed.notify_all()  # writes waiting for a move find the chunk gone
        return sum(c.nbytes for c in (*chunks.values(), *replicas.values()))

    # -- staged launches -----------------------------------------------------------------
    @_locked
    def stage(self, launch: str, alloc_id: int, copies: dict) -> None:
        """Keep launch ``launch``'s new values of chunks of ``alloc_id`` until its commit
        takes them (``take_staged``) or the allocation is freed (also already: then
        nothing is kept). A second step 1 of the launch here (run again after its worker
        left) adds its chunks."""
        if alloc_id in self._allocs or alloc_id in self._replicas:
            self._staged.setdefault(launch, (alloc_id, {}))[1].update(copies)

    @_locked
    def take_staged(self, launch: str, indices) -> dict:
        """The values ``stage`` kept for chunks ``indices`` of ``launch`` (those it has),
        no longer kept."""
        alloc_id, copies = self._staged.get(launch, (None, {}))
        taken = {k: copies.pop(k) for k in indices if k in copies}
        if not copies:
            self._staged.pop(launch, None)
        return taken

    def staged_launches(self) -> int:
        """How many launches have copies kept here (for tests)."""
        return len(self._staged)

    # -- replicas ------------------------------------------------------------------------
    def local(self, alloc_id: int, index: int) -> StoredChunk | None:
        """The home chunk or a replica held here, or None (a miss)."""
        c = self._allocs.get(alloc_id, {}).get(index)
        return c if c is not None else self._replicas.get(alloc_id, {}).get(index)

    def is_home(self, alloc_id: int, index: int) -> bool:
        return index in self._allocs.get(alloc_id, ())

    @_locked
    def add_replica(self, alloc_id: int, index: int, handle, nbytes: int, version: int,
                    source: tuple | None = None) -> None:
        """Keep a read replica of a chunk a task missed. A backup made here meanwhile
        (current after every write) stays, and the new buffer goes back; an older read
        replica gives its buffer back."""
        held = self._replicas.setdefault(alloc_id, {})
        old = held.get(index)
        if old is not None and old.durable:
            old.last_use = time.monotonic()
            self.backend.release(handle, nbytes)
            return
        held[index] = StoredChunk(handle, nbytes, version, time.monotonic(), source=source)
        if old is not None:
            self._release(old)

    def replica(self, alloc_id: int, index: int) -> StoredChunk | None:
        return self._replicas.get(alloc_id, {}).get(index)

    @_locked
    def evict(self, nbytes: int, keep=()) -> dict[int, list[int]]:
        """Drop least recently used replicas (none in ``keep``, a set of (alloc id, index))
        until ``nbytes`` more are free or none is left; return {alloc id: [indices]}."""
        lru = sorted(
            (c.last_use, a, i)
            for a, held in self._replicas.items()
            for i, c in held.items()
            if (a, i) not in keep and not c.durable
        )
        dropped: dict[int, list[int]] = {}
        for _, a, i in lru:
            if self.backend.free >= nbytes:
                break
            self.drop_replicas(a, [i])
            dropped.setdefault(a, []).append(i)
            self.stats.evicted += 1
        return dropped

    # -- coherence under moves ---------------------------------------------------------------
    @_locked
    def freeze(self, alloc_id: int, index: int) -> int | None:
        """A move copies this home chunk away: writes here wait until it ends (``thaw``, or
        the chunk's release). Returns the chunk's write count, None if it is not homed here.
        The lock makes it wait for a write in progress, whose data the copy then holds."""
        if not self.is_home(alloc_id, index):
            return None
        self._leaving.add((alloc_id, index))
        return self._writes.get((alloc_id, index), 0)

    @_locked
    def thaw(self, alloc_id: int, indices) -> None:
        """The move of these chunks ended without moving them: writes go on here."""
        for i in indices:
            self._leaving.discard((alloc_id, int(i)))
        self.changed.notify_all()

    def leaving(self, alloc_id: int, index: int) -> bool:
        """Is a move copying home chunk ``index`` away (until its release or thaw)?"""
        return (alloc_id, index) in self._leaving

    def wait_writable(self, alloc_id: int, index: int, timeout: float = MOVE_WAIT) -> None:
        """Wait until no move is copying home chunk ``index`` away. Called with the lock
        held (a task's output chunk) or not; the lock is let go while waiting. Then the
        caller, still under the lock, checks ``is_home``: the move may have taken it."""
        key = (alloc_id, index)
        with self.lock:
            if key not in self._leaving:
                return
            deadline = time.monotonic() + timeout
            while key in self._leaving:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DgvmError(f"chunk {index} of allocation {alloc_id} on {self.address} "
                                    f"stayed in the middle of a move for {timeout:.0f} s")
                self.changed.wait(left)

    def wrote(self, alloc_id: int, index: int) -> None:
        """A write changed home chunk ``index`` here (called under the lock, once its
        device work is queued: ``last_write`` completes after it)."""
        key = (alloc_id, index)
        self._writes[key] = self._writes.get(key, 0) + 1
        event = self.backend.record_event()
        if event is not None:
            self._write_events[key] = event

    def last_write(self, alloc_id: int, index: int):
        """An event of the backend's that completes once home chunk ``index``'s last
        write has run (None: nothing pending, or a backend that runs work as queued)."""
        return self._write_events.get((alloc_id, index))

    def shared(self, alloc_id: int, indices) -> None:
        """Other workers may hold copies of these home chunks from now on (exports mark
        them outside the store's lock, under a lock of their own)."""
        with self._shared_lock:
            self._exports += 1
            marks = self._shared.setdefault(alloc_id, {})
            for i in indices:
                marks[int(i)] = self._exports

    @property
    def exports(self) -> int:
        """The number of the last mark ``shared`` made (``copies_dropped``'s bound)."""
        return self._exports

    def copies_dropped(self, alloc_id: int, indices, upto: int) -> None:
        """The GVAT answered the report of a write to home chunks ``indices``, made when
        ``exports`` was ``upto``: it dropped every read replica of them it knew of then.
        A copy from an export marked by then was either among those, or its reader
        located the chunk before that write's report and the GVAT refuses it as stale
        (``GVAT.add_replica``). So those chunks' marks up to ``upto`` go, and their next
        write need not wait for the GVAT; marks of later exports stay. (A chunk with
        backups stays marked: the write's report has its backups refreshed, each an
        export from this home while the report is awaited, so marked past ``upto``.)"""
        with self._shared_lock:
            marks = self._shared.get(alloc_id)
            if not marks:
                return
            for i in indices:
                if marks.get(i, upto + 1) <= upto:
                    del marks[i]
            if not marks:
                del self._shared[alloc_id]

    def may_have_copies(self, alloc_id: int, indices) -> bool:
        """Whether another worker may hold a copy of one of these home chunks: they were
        shared (``shared``), or the allocation keeps backups."""
        held = self._shared.get(alloc_id)
        if held and any(i in held for i in indices):
            return True
        return int((self._meta.get(alloc_id) or {}).get("copies", 1)) > 1

    def write_count(self, alloc_id: int, index: int) -> int:
        return self._writes.get((alloc_id, index), 0)

    def current_replica(self, alloc_id: int, index: int, home: str, writes: int) -> bool:
        """Is the replica here a copy of ``home``'s chunk as of its ``writes``-th write?"""
        r = self.replica(alloc_id, index)
        return r is not None and r.source == (home, writes)

    def promote_backup(self, alloc_id: int, owner: str, index: int) -> bool:
        """Make the backup held here of chunk ``index`` its home (its home left); False if
        there is none. Without the store's lock: a task holding it may be waiting for this
        promotion (its miss of that chunk asks the GVAT, which waits for it). Each step is
        one dict operation, and the chunk is in one table or both throughout, so a reader
        always finds it."""
        c = self._replicas.get(alloc_id, {}).get(index)
        if c is None or not c.durable or self.is_home(alloc_id, index):
            return False
        c.durable = False
        self._owners.setdefault(alloc_id, owner)
        self._allocs.setdefault(alloc_id, {})[index] = c
        self._replicas.get(alloc_id, {}).pop(index, None)
        self.shared(alloc_id, [index])  # (other backups may remain)
        self.wrote(alloc_id, index)  # new data here: replicas of an older stay are stale
        self.stats.rehomes += 1
        return True

    # -- homes moving (migration, re-homing, rebalancing) ---------------------------------
    @_locked
    def promote(self, alloc_id: int, owner: str, index: int, chunk: StoredChunk | None = None) -> bool:
        """Make this worker the home of a chunk: from ``chunk`` (just fetched) or from the
        replica held here (False if a write dropped it meanwhile)."""
        held = self._replicas.get(alloc_id, {})
        replica = held.pop(index, None)
        if chunk is None:
            chunk = replica
            if chunk is None:
                return False
        elif replica is not None:  # a copy made meanwhile: the fetched one is home now
            self._release(replica)
        if alloc_id in self._replicas and not held:
            del self._replicas[alloc_id]
        old = self._allocs.setdefault(alloc_id, {}).get(index)
        if old is not None and old is not chunk:
            # Pulls wait for the releases sent before them (scheduler.releases), so this is a
            # release lost on its way: say so, and do not leak the old copy.
            logger.warning("dgvm: chunk %s of allocation %s moved back to %s before its old "
                           "copy here was released", index, alloc_id, self.address)
            self._release(old)
        chunk.durable = False  # (a backup that became the home)
        self._allocs[alloc_id][index] = chunk
        self._owners.setdefault(alloc_id, owner)
        self.shared(alloc_id, [index])  # replicas made from its old home may remain
        self.wrote(alloc_id, index)  # new data here: replicas of an older stay here are stale
        self.stats.rehomes += 1
        return True

    def _drop(self, table: dict, alloc_id: int, indices) -> int:
        """Free chunks ``indices`` of ``alloc_id`` held in ``table`` (homes or replicas)."""
        held = table.get(alloc_id, {})
        freed = 0
        for i in indices:
            c = held.pop(i, None)
            if c is not None:
                self._release(c)
                freed += c.nbytes
        if alloc_id in table and not held:
            del table[alloc_id]
        return freed

    @_locked
    def release(self, alloc_id: int, indices) -> int:
        """Give up home chunks that moved elsewhere; return the bytes freed. Writes
        waiting for their move go on: they find the chunk gone and send it to its new home."""
        freed = self._drop(self._allocs, alloc_id, indices)
        for i in indices:
            self._write_events.pop((alloc_id, i), None)
        self.thaw(alloc_id, indices)
        if alloc_id not in self._allocs:
            self._owners.pop(alloc_id, None)
            if alloc_id not in self._replicas:
                self._meta.pop(alloc_id, None)
        return freed

    @_locked
    def drop_replicas(self, alloc_id: int, indices, reads: bool = False) -> int:
        """Free the replicas of chunks ``indices`` held here; ``reads``: read replicas
        only (a write made them stale), not backups (the write refreshes those)."""
        if reads:
            held = self._replicas.get(alloc_id, {})
            indices = [i for i in indices if i in held and not held[i].durable]
            for i in indices:  # (under the store's lock: ``_locked``)
                self.rewritten[(alloc_id, i)] = [0, None]
                self.rewritten.move_to_end((alloc_id, i))
            while len(self.rewritten) > REWRITTEN_KEPT:
                self.rewritten.popitem(last=False)
        return self._drop(self._replicas, alloc_id, indices)

    def replicas(self, alloc_id: int) -> list[int]:
        return sorted(self._replicas.get(alloc_id, {}))

    def close(self) -> None:
        for alloc_id in {*self._allocs, *self._replicas}:  # replicas of others' too
            self.free(alloc_id)
        self.backend.close()

    def _release(self, c: StoredChunk) -> None:
        """Give a chunk's buffer back; its typed views go first (on cpu the memory is
        unmapped once the store closes: a view kept past that would read unmapped pages)."""
        c.views.clear()
        self.backend.release(c.handle, c.nbytes)

    # -- access --------------------------------------------------------------------------
    def chunk(self, alloc_id: int, index: int, owner: str | None) -> StoredChunk:
        chunks = self._allocs.get(alloc_id)
        if chunks is None:
            raise InvalidAddress(f"allocation {alloc_id} has no chunks on worker {self.address}")
        if owner is not None and self._owners[alloc_id] != owner:
            raise AccessDenied(
                f"allocation {alloc_id} belongs to {self._owners[alloc_id]!r}, not {owner!r}"
            )
        c = chunks.get(index)
        if c is None:
            raise InvalidAddress(
                f"chunk {index} of allocation {alloc_id} is not on worker {self.address} "
                f"(it holds chunks {sorted(chunks)[:8]}{'...' if len(chunks) > 8 else ''})"
            )
        return c

    def _check_range(self, alloc_id, index, c: StoredChunk, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > c.nbytes:
            raise InvalidAddress(
                f"bytes [{offset}, {offset + length}) asked of chunk {index} of allocation "
                f"{alloc_id}, which holds {c.nbytes} bytes"
            )

    @_locked
    def write(self, alloc_id: int, owner: str | None, pieces) -> int:
        """``pieces``: (chunk index, offset, uint8 host array). All are checked first."""
        checked = []
        for index, offset, data in pieces:
            data = np.asarray(data).reshape(-1).view(np.uint8)
            if (alloc_id, index) in self._leaving:
                raise ChunkLeaving(alloc_id, index)
            c = self.chunk(alloc_id, index, owner)
            self._check_range(alloc_id, index, c, offset, data.size)
            checked.append((index, c, offset, data))
        for index, c, offset, data in checked:
            self.backend.write(c.handle, c.nbytes, offset, data)
            self.wrote(alloc_id, index)
        return sum(d.size for _, _, _, d in checked)

    @_locked
    def read(self, alloc_id: int, owner: str | None, pieces) -> list[np.ndarray]:
        """``pieces``: (chunk index, offset, length) -> list of host uint8 arrays."""
        checked = []
        for index, offset, length in pieces:
            c = self.chunk(alloc_id, index, owner)
            self._check_range(alloc_id, index, c, offset, length)
            checked.append((c, offset, length))
        return [self.backend.read(c.handle, c.nbytes, o, n) for c, o, n in checked]

    def view(self, alloc_id: int, index: int):
        """The chunk's device memory (home or replica) as a 1-D uint8 array of the
        backend's kind, without copying."""
        c = self.local(alloc_id, index)
        if c is None:
            c = self.chunk(alloc_id, index, None)  # raises the precise error
        return self.backend.view(c.handle, c.nbytes)

    # -- reporting -----------------------------------------------------------------------
    def holds(self, alloc_id: int) -> list[int]:
        return sorted(self._allocs.get(alloc_id, {}))

    def metrics(self) -> dict:
        other, total, free = self.backend.memory_state()
        return {
            "capacity": self.backend.capacity,
            "used": self.backend.used,
            "other_used": other,
            "device_total": total,  # the whole device, whoever uses it (dashboard)
            "device_free": free,
            "allocations": len(self._allocs),
            "scheduler": self.scheduler,  # (a GVAT that does not know it rebuilds from this store)
            "chunks": sum(len(c) for c in self._allocs.values()),
            "replicas": sum(len(c) for c in self._replicas.values()),
            # tasks that returned with their device work left running (queued_work)
            "stats": {**self.stats.to_dict(), "left_running": self.backend.queued.left_running},
        }


@dataclass
class StoreStats:
    """Counters of one worker's accesses: hits, misses, and bytes/time per transfer path."""

    hits: int = 0
    misses: int = 0
    rehomes: int = 0  # chunks whose home moved here
    evicted: int = 0  # replicas dropped to make room
    transient: int = 0  # chunks read remotely without keeping a replica (no room)
    gathered: int = 0  # regions an op read from several chunks into a new array (a copy)
    ahead: int = 0  # pieces of other workers' chunks asked for before the task needed them
    pushed: int = 0  # pieces of other workers' chunks their homes pushed here that a task took
    paths: dict = None  # path -> {"count", "bytes", "seconds", "copy_seconds"}

    def __post_init__(self):
        self.paths = {}

    def moved(self, path: str, nbytes: int, seconds: float, copy_seconds: float) -> None:
        """A chunk came in by ``path``: ``seconds`` from asking its holder to having it,
        ``copy_seconds`` of that in the copy itself (the link's share)."""
        p = self.paths.setdefault(path, {"count": 0, "bytes": 0, "seconds": 0.0, "copy_seconds": 0.0})
        p["count"] += 1
        p["bytes"] += nbytes
        p["seconds"] += seconds
        p["copy_seconds"] += copy_seconds

    def to_dict(self) -> dict:
        return {
            "hits": self.hits, "misses": self.misses, "rehomes": self.rehomes,
            "evicted": self.evicted, "transient": self.transient, "gathered": self.gathered, "ahead": self.ahead,
            "pushed": self.pushed,
            # list(): one step, while a fetch in another thread may add a path
            "paths": {k: dict(v) for k, v in list(self.paths.items())},
        }
