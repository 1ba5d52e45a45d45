"""The global virtual allocation table.

Pure bookkeeping, no I/O: the scheduler plugin calls it from its handlers. Each allocation
owns one aligned range of the 64-bit virtual address space and a columnar chunk table
(byte offsets, home worker, version, last access), so that allocating and translating stay
fast at 100,000 chunks.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

import numpy as np
from dask.utils import format_bytes

from dgvm.gvat import copies as durable
from dgvm.gvat import placement as policies
from dgvm.gvat.inventory import Inventory, WorkerRecord
from dgvm.gvat.ranges import RangeAllocator
from dgvm.protocol.errors import AccessDenied, InvalidAddress, OutOfDeviceMemory
from dgvm.protocol.messages import GONE, KEPT, STALE, ChunkMap, Translation
from dgvm.protocol.records import AllocationInfo, AllocId, ChunkInfo, ClientId, Location


@dataclass
class Allocation:
    """The GVAT's record of one allocation (the user's process holds an
    ``AllocationHandle`` of it)."""

    alloc_id: AllocId
    owner: ClientId
    vaddr: int
    nbytes: int
    chunk_bytes: int  # nominal chunk size (the largest chunk)
    offsets: np.ndarray  # int64, nchunks + 1 byte offsets of chunk starts, then nbytes
    homes: np.ndarray  # int64 WorkerUid of each chunk's home
    versions: np.ndarray  # int64
    last_access: np.ndarray  # float64 (time.time())
    placement: str
    created: float
    dtype: str | None = None
    shape: tuple | None = None
    grid_chunks: tuple | None = None  # per-axis block sizes when it backs an array
    uniform: bool = True
    # chunk index -> WorkerUids holding a read replica of the chunk's current version
    replicas: dict = field(default_factory=dict)
    # chunk index -> {WorkerUid: launches that read it there since its home last used it}
    remote_reads: dict = field(default_factory=dict)
    moving: set = field(default_factory=set)  # chunk indices whose home is being moved
    moves: int = 0  # the number of its last move told to its owner (``messages.MOVED_TOPIC``)
    copies: int = 1  # copies of each chunk kept: the home and copies - 1 backups
    # chunk index -> WorkerUids holding a durable copy (``gvat.copies``), refreshed by writes
    backups: dict = field(default_factory=dict)
    # chunk index -> key of the task whose write its backups got last
    last_writer: dict = field(default_factory=dict)
    filling: set = field(default_factory=set)  # (chunk index, WorkerUid): new backups being copied
    # hits, misses, homes moved, bytes/time per path (for dgvm.stats and the dashboard)
    stats: dict = field(
        default_factory=lambda: {"hits": 0, "misses": 0, "rehomes": 0, "migrated": 0, "paths": {}}
    )

    @property
    def nchunks(self) -> int:
        return len(self.homes)

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def size(self, index: int) -> int:
        """Bytes of chunk ``index`` (O(1): handlers touching a few chunks use this)."""
        return int(self.offsets[index + 1] - self.offsets[index])

    def chunk_at(self, offset: int) -> int:
        if self.uniform:
            return offset // self.chunk_bytes
        return int(np.searchsorted(self.offsets, offset, side="right")) - 1


def _fmt(n: int) -> str:
    return format_bytes(n)


def _partner_id(colocate) -> int:
    return int(colocate) if isinstance(colocate, (int, np.integer)) else int(colocate[0])


# Allocation ids are never reused, also across a restart of the scheduler: a GVAT's first
# id comes from the clock, ``IDS_PER_SECOND`` per second since ``ID_EPOCH``. An earlier
# GVAT, which handed out fewer ids than that per second of its life, gave only ids below
# it, so an id handed out before the workers told a restarted GVAT of the earlier
# allocations (``gvat.restore``) never names one of them.
ID_EPOCH = 1767225600  # 2026-01-01 UTC
IDS_PER_SECOND = 1 << 16
NOT_RESTORED_KEPT = 4096  # allocations not put back after a restart whose reason is kept


def first_id(now: float | None = None) -> int:
    """The first allocation id of a GVAT made at ``now`` (default: the time)."""
    return max(1, int(((time.time() if now is None else now) - ID_EPOCH) * IDS_PER_SECOND))


class GVAT:
    """Virtual address space, allocations and their chunk tables, worker inventory."""

    def __init__(self, base: int, size: int, alignment: int, headroom: float, first: int | None = None):
        self.space = RangeAllocator(base, size, alignment)
        self.headroom = headroom
        self.inventory = Inventory()
        self.allocations: dict[int, Allocation] = {}
        self._starts: list[int] = []  # sorted vaddrs of live allocations
        self._at: dict[int, Allocation] = {}  # vaddr -> allocation
        self._first_id = first_id() if first is None else int(first)
        self._next_id = self._first_id
        # id -> why an allocation made before a restart was not put back (bounded)
        self.not_restored: dict[int, str] = {}
        self._by_owner: dict[str, set[int]] = {}

    # -- allocation ----------------------------------------------------------------------
    def allocate(
        self,
        owner: str,
        sizes: np.ndarray,
        placement: str = "balanced",
        colocate: int | None = None,
        dtype: str | None = None,
        shape: tuple | None = None,
        grid_chunks: tuple | None = None,
        loads: dict[int, float] | None = None,
        copies: int = 1,
    ) -> Allocation:
        """Reserve a virtual range and homes for chunks of ``sizes`` bytes, and ``copies -
        1`` backups of each (``gvat.copies``; all or nothing)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        if len(sizes) == 0 or (sizes <= 0).any():
            raise ValueError("an allocation needs at least one chunk, each of positive size")
        nbytes = int(sizes.sum())
        live = self.inventory.live()
        if live:
            durable.check_count(copies, len(live))
        homes_pos = self._place(sizes, live, placement, colocate, loads or {})
        vaddr = self.space.allocate(nbytes)
        if vaddr is None:  # 128 TiB of address space is spent: say so, like a full device
            raise OutOfDeviceMemory(
                f"virtual address space exhausted: {_fmt(nbytes)} asked, "
                f"{_fmt(self.space.free_total)} of {_fmt(self.space.limit)} free in pieces"
            )
        uids = np.array([r.uid for r in live], dtype=np.int64)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        now = time.time()
        alloc_id, self._next_id = self._next_id, self._next_id + 1
        alloc = Allocation(
            alloc_id=alloc_id,
            owner=owner,
            vaddr=vaddr,
            nbytes=nbytes,
            chunk_bytes=int(sizes.max()),
            offsets=offsets,
            homes=uids[homes_pos],
            versions=np.zeros(len(sizes), dtype=np.int64),
            last_access=np.full(len(sizes), now),
            placement=placement if colocate is None else f"colocate:{_partner_id(colocate)}",
            created=now,
            dtype=dtype,
            shape=tuple(shape) if shape is not None else None,
            grid_chunks=grid_chunks,
            uniform=bool((sizes[:-1] == sizes[0]).all() and sizes[-1] <= sizes[0]),
            copies=int(copies),
        )
        self._book(alloc, +1)
        try:
            durable.place(alloc, live, self.headroom)
        except Exception:
            self._book(alloc, -1)
            self.space.free(vaddr)
            raise
        self.allocations[alloc.alloc_id] = alloc
        self._by_owner.setdefault(owner, set()).add(alloc.alloc_id)
        bisect.insort(self._starts, vaddr)
        self._at[vaddr] = alloc
        return alloc

    def _place(self, sizes, live: list[WorkerRecord], placement, colocate, loads):
        if not live:
            raise OutOfDeviceMemory(
                f"{_fmt(int(sizes.sum()))} asked but no worker with a dgvm chunk store is "
                "connected (start workers with --preload dgvm.worker, or use dgvm.LocalCluster)"
            )
        if placement not in policies.POLICIES:
            raise ValueError(
                f"unknown placement {placement!r}; available: {', '.join(policies.POLICIES)}"
                " or colocate=<allocation>"
            )
        bw = self.inventory.effective_bandwidth(live)
        cands = [
            policies.Candidate(
                uid=r.uid,
                limit=r.free - int(self.headroom * r.profile.capacity),
                bandwidth=bw[r.uid],
                load=loads.get(r.address, 0.0),
            )
            for r in live
        ]
        policy = policies.POLICIES[placement]
        try:
            if colocate is not None:
                # An allocation id (chunk i goes where its chunk i lives), or [id, picks]:
                # chunk i goes where chunk picks[i] of it lives (-1: no partner).
                other = self.get(_partner_id(colocate))
                pos = {r.uid: j for j, r in enumerate(live)}
                picks = range(len(other.homes)) if isinstance(colocate, (int, np.integer)) else colocate[1]
                partner = [pos.get(int(other.homes[i])) if 0 <= i < len(other.homes) else None
                           for i in picks]
                return policies.colocate(sizes, cands, partner, policies.POLICIES["balanced"])
            return policy.place(sizes, cands)
        except policies.NoFit:
            per_worker = ", ".join(
                f"{r.address} ({r.profile.device}): {_fmt(max(c.limit, 0))} placeable of "
                f"{_fmt(r.free)} free"
                for r, c in zip(live, cands)
            )
            raise OutOfDeviceMemory(
                f"cannot place {_fmt(int(sizes.sum()))} in {len(sizes)} chunks of up to "
                f"{_fmt(int(sizes.max()))}: free device memory per worker, keeping "
                f"{self.headroom:.0%} headroom: {per_worker}; total placeable "
                f"{_fmt(sum(max(c.limit, 0) for c in cands))}"
            ) from None

    def _book(self, alloc: Allocation, sign: int) -> None:
        """Add (+1) or remove (-1) an allocation's bytes on its home workers."""
        sizes = alloc.sizes()
        uids, inverse = np.unique(alloc.homes, return_inverse=True)
        per = np.bincount(inverse, weights=sizes)
        cnt = np.bincount(inverse)
        for uid, b, c in zip(uids.tolist(), per.tolist(), cnt.tolist()):
            rec = self.inventory.by_uid[uid]
            rec.used += sign * int(b)
            rec.chunks += sign * int(c)

    def free(self, alloc_id: int, owner: str | None = None) -> Allocation:
        """Forget an allocation; return it so the caller can free its chunks on workers."""
        alloc = self.get(alloc_id, owner)
        del self.allocations[alloc_id]
        self._starts.pop(bisect.bisect_left(self._starts, alloc.vaddr))
        del self._at[alloc.vaddr]
        self.space.free(alloc.vaddr)
        self._book(alloc, -1)
        durable.unbook_all(alloc, self.inventory)
        for i, holders in alloc.replicas.items():
            for uid in holders:
                self.inventory.by_uid[uid].used -= alloc.size(i)
        owned = self._by_owner[alloc.owner]
        owned.discard(alloc_id)
        if not owned:
            del self._by_owner[alloc.owner]
        return alloc

    # -- a scheduler that restarted (gvat.restore) -----------------------------------------
    def adopt(self, alloc: Allocation) -> bool:
        """Take back an allocation made before the scheduler restarted, with its id and
        virtual range (its homes, backups and their bytes as ``alloc`` books them); False,
        changing nothing, if either is taken."""
        if alloc.alloc_id in self.allocations or not self.space.reserve(alloc.vaddr, alloc.nbytes):
            return False
        self._book(alloc, +1)
        self.allocations[alloc.alloc_id] = alloc
        self._by_owner.setdefault(alloc.owner, set()).add(alloc.alloc_id)
        bisect.insort(self._starts, alloc.vaddr)
        self._at[alloc.vaddr] = alloc
        self.resume_ids(alloc.alloc_id)
        return True

    @property
    def first_id(self) -> int:
        """The first id this GVAT hands out: every id below it is of an earlier one."""
        return self._first_id

    def not_put_back(self, alloc_id: int, why: str) -> None:
        """Remember why allocation ``alloc_id`` of an earlier GVAT was not put back: its
        owner's next request names it."""
        self.not_restored[int(alloc_id)] = why
        while len(self.not_restored) > NOT_RESTORED_KEPT:
            del self.not_restored[next(iter(self.not_restored))]

    def resume_ids(self, last: int) -> None:
        """New allocations get ids past ``last`` (ids are never reused)."""
        self._next_id = max(self._next_id, int(last) + 1)

    def get(self, alloc_id: int, owner: str | None = None) -> Allocation:
        alloc = self.allocations.get(alloc_id)
        if alloc is None:
            why = self.not_restored.get(alloc_id)
            if why is not None:
                raise InvalidAddress(f"allocation {alloc_id} {why}")
            if self._first_id <= alloc_id < self._next_id:  # ids are never reused
                raise InvalidAddress(f"allocation {alloc_id} was already freed")
            if 0 < alloc_id < self._first_id:
                raise InvalidAddress(
                    f"no allocation with id {alloc_id}: not one this scheduler made, nor one the "
                    "workers reported after a restart of the scheduler (freed before it, or no worker "
                    "that held it came back)")
            raise InvalidAddress(f"no allocation with id {alloc_id}")
        if owner is not None and alloc.owner != owner:
            raise AccessDenied(
                f"allocation {alloc_id} belongs to client {alloc.owner!r}, not {owner!r}"
            )
        return alloc

    # -- coherence: versions and replicas -------------------------------------------------
    def add_replica(self, alloc_id: int, index: int, address: str, nbytes: int,
                    path: str, seconds: float, source: str, version: int) -> str:
        """Record that ``address`` now holds a replica of a chunk (after a miss): KEPT.
        GONE when the allocation is gone or the worker unknown; STALE when the chunk
        is no longer homed at ``source`` or no longer at ``version`` (it moved, or was
        written, while it was copied: the buffer read may hold something else by now).
        Unless kept, the worker drops its copy."""
        alloc = self.allocations.get(alloc_id)
        rec = self.inventory.by_address.get(address)
        if alloc is None or rec is None:
            return GONE
        home = self.inventory.by_uid.get(int(alloc.homes[index]))
        if home is None or home.address != source or int(alloc.versions[index]) != int(version):
            return STALE
        if rec.uid in alloc.backups.get(index, ()):
            # A backup was booked there while the chunk was fetched: the worker's copy is
            # (or its refresh makes it) that backup, which a write refreshes, never drops.
            return KEPT
        holders = alloc.replicas.setdefault(index, set())
        if rec.uid not in holders:
            holders.add(rec.uid)
            rec.used += nbytes
        p = alloc.stats["paths"].setdefault(path, {"count": 0, "bytes": 0, "seconds": 0.0})
        p["count"] += 1
        p["bytes"] += nbytes
        p["seconds"] += seconds
        return KEPT

    def wrote(self, alloc_id: int, indices) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """Chunks were written at their home: bump their versions and forget their read
        replicas. Returns ({address: [chunk indices]} of replicas the caller must drop,
        the same of backups it must refresh)."""
        alloc = self.allocations.get(alloc_id)
        if alloc is None:
            return {}, {}
        idx = np.asarray(list(indices), dtype=np.int64)
        alloc.versions[idx] += 1
        alloc.last_access[idx] = time.time()
        drop: dict[str, list[int]] = {}
        for i in idx.tolist():
            alloc.remote_reads.pop(i, None)  # the home used it
            for uid in alloc.replicas.pop(i, ()):
                rec = self.inventory.by_uid[uid]
                rec.used -= alloc.size(i)
                if rec.alive:
                    drop.setdefault(rec.address, []).append(i)
        return drop, durable.live_holders(alloc, self.inventory, idx.tolist()) if alloc.backups else {}

    def count_reads(self, alloc_id: int, hits: int, misses: int) -> None:
        alloc = self.allocations.get(alloc_id)
        if alloc is not None:
            alloc.stats["hits"] += hits
            alloc.stats["misses"] += misses

    def owned_by(self, owner: str) -> list[int]:
        return sorted(self._by_owner.get(owner, ()))

    def has_owner(self, owner: str) -> bool:
        return owner in self._by_owner

    # -- lookups -------------------------------------------------------------------------
    def find(self, vaddr: int) -> tuple[Allocation, int]:
        """(allocation, byte offset in it) holding ``vaddr``; InvalidAddress if none."""
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i >= 0:
            alloc = self._at[self._starts[i]]
            off = vaddr - alloc.vaddr
            if off < alloc.nbytes:
                return alloc, off
        raise InvalidAddress(f"address {vaddr:#x} is not inside any live allocation")

    def overlapping(self, vaddr: int, nbytes: int) -> list[int]:
        """Ids of the live allocations that share a byte with ``[vaddr, vaddr + nbytes)``."""
        i = max(0, bisect.bisect_right(self._starts, vaddr) - 1)
        out = []
        for start in self._starts[i:]:
            if start >= vaddr + nbytes:
                break
            a = self._at[start]
            if a.vaddr + a.nbytes > vaddr:
                out.append(a.alloc_id)
        return out

    def translate(self, vaddr: int) -> Location:
        alloc, off = self.find(vaddr)
        k = alloc.chunk_at(off)
        rec = self.inventory.by_uid[int(alloc.homes[k])]
        return Location(
            alloc_id=alloc.alloc_id,
            chunk_index=int(k),
            worker=rec.address,
            device=rec.profile.device,
            offset=int(off - alloc.offsets[k]),
            tier="device" if rec.alive else "lost",
        )

    def translate_many(self, vaddrs) -> Translation:
        """Translate many addresses at once; a columnar answer (lists of equal length:
        alloc_id, chunk_index, offset, and an index into ``workers``/``devices``/``tiers``).
        Raises InvalidAddress naming the first address that is in no allocation."""
        v = np.asarray(vaddrs, dtype=np.int64)
        starts = np.asarray(self._starts, dtype=np.int64)
        pos = np.searchsorted(starts, v, side="right") - 1
        ids = np.empty(len(v), dtype=np.int64)
        chunk = np.empty(len(v), dtype=np.int64)
        offset = np.empty(len(v), dtype=np.int64)
        home = np.empty(len(v), dtype=np.int64)
        bad = pos < 0
        for p in np.unique(pos[~bad]).tolist():
            sel = np.flatnonzero(pos == p)
            a = self._at[int(starts[p])]  # only the allocations asked about
            off = v[sel] - a.vaddr
            inside = off < a.nbytes
            bad[sel[~inside]] = True
            sel, off = sel[inside], off[inside]
            k = np.searchsorted(a.offsets, off, side="right") - 1
            ids[sel], chunk[sel], offset[sel] = a.alloc_id, k, off - a.offsets[k]
            home[sel] = a.homes[k]
        if bad.any():
            first = int(v[np.flatnonzero(bad)[0]])
            raise InvalidAddress(f"address {first:#x} is not inside any live allocation")
        uids, inverse = np.unique(home, return_inverse=True)
        recs = [self.inventory.by_uid[u] for u in uids.tolist()]
        return Translation(
            alloc_id=ids.tolist(),
            chunk_index=chunk.tolist(),
            offset=offset.tolist(),
            home=inverse.tolist(),
            workers=[r.address for r in recs],
            devices=[r.profile.device for r in recs],
            tiers=["device" if r.alive else "lost" for r in recs],
        )

    def chunk_map(self, alloc: Allocation) -> ChunkMap:
        """A compact, columnar view of an allocation's chunks for clients."""
        uids, inverse = np.unique(alloc.homes, return_inverse=True)
        recs = [self.inventory.by_uid[u] for u in uids.tolist()]
        return ChunkMap(
            alloc_id=alloc.alloc_id,
            vaddr=alloc.vaddr,
            nbytes=alloc.nbytes,
            offsets=alloc.offsets.tolist(),
            home=inverse.astype(np.int64).tolist(),
            workers=[r.address for r in recs],
            devices=[r.profile.device for r in recs],
            tiers=["device" if r.alive else "lost" for r in recs],
            versions=alloc.versions.tolist(),
        )

    def info(self, alloc: Allocation, with_chunks: bool = False) -> AllocationInfo:
        chunks = ()
        if with_chunks:
            m = self.chunk_map(alloc)
            chunks = tuple(
                ChunkInfo(
                    index=i,
                    vaddr=alloc.vaddr + m.offsets[i],
                    nbytes=m.offsets[i + 1] - m.offsets[i],
                    worker=m.workers[h],
                    device=m.devices[h],
                    tier=m.tiers[h],
                    version=m.versions[i],
                    backups=tuple(sorted(self.inventory.by_uid[u].address
                                         for u in alloc.backups.get(i, ())
                                         if self.inventory.by_uid[u].alive
                                         and (i, u) not in alloc.filling)),  # (not a copy yet)
                )
                for i, h in enumerate(m.home)
            )
        return AllocationInfo(
            alloc_id=alloc.alloc_id,
            owner=alloc.owner,
            vaddr=alloc.vaddr,
            nbytes=alloc.nbytes,
            chunk_bytes=alloc.chunk_bytes,
            nchunks=alloc.nchunks,
            placement=alloc.placement,
            created=alloc.created,
            dtype=alloc.dtype,
            shape=alloc.shape,
            chunks=chunks,
            copies=alloc.copies,
        )

    def holders(self, alloc: Allocation) -> set[str]:
        """Live addresses holding any chunk or replica of ``alloc``."""
        uids = set(np.unique(alloc.homes).tolist())
        for h in (*alloc.replicas.values(), *alloc.backups.values()):
            uids |= h
        return {self.inventory.by_uid[u].address for u in uids if self.inventory.by_uid[u].alive}

    def by_worker(self, alloc: Allocation) -> dict[str, list[int]]:
        """Live home address -> chunk indices of ``alloc`` homed there."""
        out: dict[str, list[int]] = {}
        for uid in np.unique(alloc.homes).tolist():
            rec = self.inventory.by_uid[uid]
            if rec.alive:
                out[rec.address] = np.flatnonzero(alloc.homes == uid).tolist()
        return out
