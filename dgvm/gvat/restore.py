"""A GVAT rebuilt from what the workers hold, after its scheduler restarted.

Pure bookkeeping, no I/O (``dgvm.scheduler.rebuild`` asks the workers and does what this
answers). A worker's report (``ChunkStore.report``) lists, per allocation it holds chunks
of, the owner, the allocation's ``AllocationMeta`` and its home chunks and backups. The
first report that names an allocation with its meta puts it back: its id and virtual range
as they were, every chunk homed on ``missing`` (a record of no live worker: each chunk no
worker reported reads as lost, ``ChunkLost``) until a report names its home. New ids and
ranges start past the highest any worker was ever given (``retire``).
"""

from __future__ import annotations

import time

import numpy as np

from dgvm.gvat import copies
from dgvm.gvat.inventory import WorkerRecord
from dgvm.gvat.table import Allocation
from dgvm.protocol.chunk_grid import block_nbytes
from dgvm.protocol.records import AllocationMeta, DeviceProfile

#: the address of ``Restored.missing``, as error messages show it
UNREPORTED = "(none: no worker reported them since the scheduler restarted)"


def chunk_sizes(meta: AllocationMeta) -> np.ndarray | None:
    """The bytes of each chunk the meta describes; None if they do not add up."""
    if meta.grid_chunks is not None and meta.dtype is not None:
        sizes = block_nbytes(meta.grid_chunks, np.dtype(meta.dtype).itemsize)
    else:
        full, rest = divmod(int(meta.nbytes), int(meta.chunk_bytes))
        sizes = np.full(full + (rest > 0), int(meta.chunk_bytes), dtype=np.int64)
        if rest:
            sizes[-1] = rest
    if len(sizes) != meta.nchunks or int(sizes.sum()) != meta.nbytes or (sizes <= 0).any():
        return None
    return sizes


def parts(entry: dict, step: int):
    """A report's entry of one allocation as entries of at most ``step`` chunks each (each
    merged in one go: ``merge_one`` of 20,000 chunks takes about 20 ms)."""
    homes, backups = entry.get("homes") or [], entry.get("backups") or []
    for start in range(0, max(len(homes) + len(backups), 1), step):
        yield {**entry, "homes": homes[start:start + step],
               "backups": backups[max(start - len(homes), 0):max(start + step - len(homes), 0)]}


class Actions:
    """What the rebuild must do on one worker after its report: give up home chunks
    another worker holds too (``release``), drop backups (``drop``), free allocations it
    cannot take back (``free``)."""

    def __init__(self):
        self.release: dict[int, list[int]] = {}
        self.drop: dict[int, list[int]] = {}
        self.free: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.release or self.drop or self.free)


def leftovers(gvat, rec: WorkerRecord, report: dict) -> Actions:
    """What a worker whose connection to a scheduler that lived on broke, and which came
    back (as ``rec``), must give up of what it reports: the scheduler took it for gone (its
    chunks lost, or their copies took over), so all of it, except what the GVAT booked on
    it since it came back."""
    acts = Actions()
    for entry in report.get("allocations") or ():
        alloc_id = int(entry["alloc_id"])
        alloc = gvat.allocations.get(alloc_id)
        if alloc is None:
            acts.free.append(alloc_id)  # freed meanwhile (ids are never reused)
            continue
        homes = [i for i, *_ in entry.get("homes") or ()
                 if not (0 <= i < alloc.nchunks and int(alloc.homes[i]) == rec.uid)]
        backups = [i for i, *_ in entry.get("backups") or () if rec.uid not in alloc.backups.get(i, ())]
        if homes:
            acts.release[alloc_id] = homes
        if backups:
            acts.drop[alloc_id] = backups
    return acts


class Restored:
    """The state of one rebuild: the allocations put back so far, and what is needed to
    check their backups once every worker reported."""

    def __init__(self, gvat):
        self.gvat = gvat
        self.missing: WorkerRecord = gvat.inventory.register(
            UNREPORTED, DeviceProfile(backend="none", device="none", name="none", capacity=0, bandwidth=0.0))
        gvat.inventory.remove(UNREPORTED)
        self.ids: set[int] = set()  # allocations put back
        self.writes: dict[tuple[int, int], int] = {}  # (alloc id, chunk) -> its home's write count
        # (alloc id, chunk, backup's worker uid) -> (home address, write count) it was copied at
        self.sources: dict[tuple[int, int, int], tuple] = {}
        self.orphans: dict[int, dict[int, list]] = {}  # alloc id -> {uid: [entries]}: no meta yet
        self.deferred: dict[str, Actions] = {}  # what other workers must do (their orphans put back)
        self.high = 0  # the highest virtual address end any worker was given
        self.retired: dict[int, int] = {}  # start -> size: free ranges no new allocation takes
        self.chunks = 0  # chunks and backups put back

    # -- one worker's report -------------------------------------------------------------
    def merge_one(self, rec: WorkerRecord, entry: dict, acts: Actions) -> None:
        """Put back one allocation of a worker's report (O(its chunks there))."""
        alloc_id = int(entry["alloc_id"])
        self.gvat.resume_ids(alloc_id)  # (also one that cannot be put back: its id stays unused)
        alloc = self.gvat.allocations.get(alloc_id)
        if alloc is None:
            if alloc_id in self.ids or entry.get("meta") is None:
                # (freed since it was put back; or its meta may come with another report)
                if alloc_id not in self.ids:
                    self.orphans.setdefault(alloc_id, {}).setdefault(rec.uid, []).append(entry)
                else:
                    acts.free.append(alloc_id)
                return
            alloc = self._put_back(alloc_id, entry)
            if alloc is None:
                acts.free.append(alloc_id)
                return
            for uid, others in self.orphans.pop(alloc_id, {}).items():
                held = self.gvat.inventory.by_uid.get(uid)
                if held is not None and held.alive:
                    for other in others:
                        self._chunks(alloc, held, other, self.deferred.setdefault(held.address, Actions()))
        elif alloc_id not in self.ids or alloc.owner != entry.get("owner"):
            acts.free.append(alloc_id)  # the id went to a new allocation meanwhile
            return
        self._chunks(alloc, rec, entry, acts)

    def _put_back(self, alloc_id: int, entry: dict):
        meta = AllocationMeta.from_dict(entry["meta"])
        sizes = chunk_sizes(meta)
        if sizes is None:
            return None
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        alloc = Allocation(
            alloc_id=alloc_id, owner=entry["owner"], vaddr=int(meta.vaddr), nbytes=int(meta.nbytes),
            chunk_bytes=int(meta.chunk_bytes), offsets=offsets,
            homes=np.full(len(sizes), self.missing.uid, dtype=np.int64),
            versions=np.zeros(len(sizes), dtype=np.int64), last_access=np.full(len(sizes), time.time()),
            placement=meta.placement, created=float(meta.created), dtype=meta.dtype,
            shape=tuple(meta.shape) if meta.shape is not None else None, grid_chunks=meta.grid_chunks,
            uniform=bool((sizes[:-1] == sizes[0]).all() and sizes[-1] <= sizes[0]),
            copies=int(meta.copies),
        )
        self._unretire(alloc.vaddr, alloc.nbytes)
        if not self.gvat.adopt(alloc):  # its range went to a new allocation meanwhile
            taken = ", ".join(map(str, self.gvat.overlapping(alloc.vaddr, alloc.nbytes))) or "?"
            self.gvat.not_put_back(alloc_id, (
                f"was made before the scheduler restarted and was not put back: its virtual range "
                f"[{alloc.vaddr:#x}, {alloc.vaddr + alloc.nbytes:#x}) went to allocation {taken} "
                "made after the restart, before a worker that held it came back"))
            return None
        self.ids.add(alloc_id)
        return alloc

    def _chunks(self, alloc, rec: WorkerRecord, entry: dict, acts: Actions) -> None:
        a = alloc.alloc_id
        # (vectorized: an allocation may have a million chunks; a store lists each once)
        homes = np.asarray(entry.get("homes") or np.empty((0, 3)), dtype=np.int64).reshape(-1, 3)
        idx, nbytes = homes[:, 0], homes[:, 1]
        inside = (idx >= 0) & (idx < alloc.nchunks)
        ok = inside.copy()
        ok[inside] = (nbytes[inside] == alloc.sizes()[idx[inside]]) & (alloc.homes[idx[inside]] == self.missing.uid)
        if not ok.all():  # another worker's copy is its home
            acts.release.setdefault(a, []).extend(idx[~ok].tolist())
        taken = int(nbytes[ok].sum())
        alloc.homes[idx[ok]] = rec.uid
        self.missing.used -= taken
        self.missing.chunks -= int(ok.sum())
        rec.used += taken
        rec.chunks += int(ok.sum())
        if alloc.copies > 1:  # (only backups are checked against them)
            self.writes.update(zip(((a, i) for i in idx[ok].tolist()), homes[ok, 2].tolist()))
        self.chunks += int(ok.sum())
        for i, nbytes, home, writes in entry.get("backups") or ():
            if not 0 <= i < alloc.nchunks or nbytes != alloc.size(i) or int(alloc.homes[i]) == rec.uid:
                acts.drop.setdefault(a, []).append(i)
                continue
            copies.book(alloc, rec, [i], +1)
            self.sources[(a, i, rec.uid)] = (home, int(writes))
            self.chunks += 1

    def take_deferred(self) -> dict[str, Actions]:
        """{address: Actions} for workers whose chunks a later report's meta put back."""
        out, self.deferred = self.deferred, {}
        return {a: acts for a, acts in out.items() if acts}

    # -- once every worker reported ------------------------------------------------------
    def stale_backups(self) -> dict[str, dict[int, list[int]]]:
        """Backups that are not a copy of their chunk as it is, taken off the books:
        {holder address: {alloc id: [chunks]}} to drop there. A backup whose home is
        here must have been copied at the home's write count (a write's copy to it may
        have been cut short); of the backups of a chunk whose home is lost, those copied
        at the highest count stay (one of them becomes the home)."""
        inv = self.gvat.inventory
        best: dict[tuple[int, int], int] = {}
        for (a, i, _), (_, writes) in self.sources.items():
            best[(a, i)] = max(best.get((a, i), -1), writes)
        out: dict[str, dict[int, list[int]]] = {}
        for (a, i, uid), (home, writes) in self.sources.items():
            alloc = self.gvat.allocations.get(a)
            if alloc is None or uid not in alloc.backups.get(i, ()):
                continue
            home_rec = inv.by_uid[int(alloc.homes[i])]
            if home_rec.uid == self.missing.uid:
                current = writes == best[(a, i)]
            else:
                current = home == home_rec.address and writes == self.writes.get((a, i))
            if not current:
                copies.book(alloc, inv.by_uid[uid], [i], -1)
                if inv.by_uid[uid].alive:
                    out.setdefault(inv.by_uid[uid].address, {}).setdefault(a, []).append(i)
        self.sources.clear()
        return out

    def orphans_to_free(self) -> dict[str, list[int]]:
        """Allocations some worker holds chunks of, but none told their meta: {address:
        [alloc ids]} to free there (nothing can put them back)."""
        out: dict[str, list[int]] = {}
        for alloc_id, held in self.orphans.items():
            for uid in held:
                rec = self.gvat.inventory.by_uid.get(uid)
                if rec is not None and rec.alive:
                    out.setdefault(rec.address, []).append(alloc_id)
        self.orphans.clear()
        return out

    def lost(self) -> dict[int, list[int]]:
        """Alloc id -> chunks whose home no worker reported, of those put back (O(chunks):
        ``missing.chunks`` counts them)."""
        out = {}
        for a in self.ids:
            alloc = self.gvat.allocations.get(a)
            if alloc is not None:
                idx = np.flatnonzero(alloc.homes == self.missing.uid).tolist()
                if idx:
                    out[a] = idx
        return out

    def retire(self) -> None:
        """No new allocation takes a range below the highest end any worker was given:
        the free pieces there are booked as retired."""
        for start, size in self.gvat.space.free_below(self.high):
            if self.gvat.space.reserve(start, size):
                self.retired[start] = size

    def _unretire(self, vaddr: int, nbytes: int) -> None:
        """A report that came late names a range inside a retired piece: give the piece
        back (``retire`` books what is left of it again)."""
        for start, size in list(self.retired.items()):
            if start <= vaddr < start + size:
                self.gvat.space.free(start)
                del self.retired[start]
