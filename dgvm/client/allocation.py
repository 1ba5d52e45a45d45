"""The client-side handle of one GVAT allocation and its chunk map.

``GlobalBuffer`` (bytes) and ``DArray`` (n-d arrays) both stand on it: it knows the
allocation's virtual range, where each chunk lives, and how to send pieces of chunks to
their workers and get them back, one request per worker.
"""

from __future__ import annotations

import copy
import weakref
from collections import defaultdict

import numpy as np
from distributed import Client
from distributed.protocol import to_serialize

from dgvm import dask_compat
from dgvm.client.left_workers import LeftWorkers
from dgvm.client.pending import Pending
from dgvm.client.session import (
    Session, call_scheduler, call_workers, client_or_current, is_closed, session_of,
)
from dgvm.protocol import arguments, messages
from dgvm.protocol.errors import ChunkLost, ConnectionBroke, InvalidAddress, broken_connection
from dgvm.protocol.messages import ChunkMap
from dgvm.protocol.records import ChunkInfo

# How many times a read or write follows chunks that moved while it was on its way.
MOVED_RETRIES = 8


# Seconds a request that failed on a worker's connection waits for the news that the worker
# left (then its chunks are named lost); past that its own error is raised.
LEFT_WAIT = 5.0


class LiveAllocations:
    """The allocation handles of one session that it still holds (a session part), so
    that the GVAT's events about chunks whose home moved (``messages.MOVED_TOPIC``) mark
    their chunk maps stale."""

    def __init__(self, session: Session):
        self._handles: "weakref.WeakValueDictionary[int, AllocationHandle]" = weakref.WeakValueDictionary()
        self._client_id = session.client.id
        session.client.subscribe_topic(messages.MOVED_TOPIC, self._on_moved)
        # A worker left: the chunks it held are lost, and the maps must say so.
        session.part(LeftWorkers).on_left(lambda address: self.all_stale())

    def add(self, handle: "AllocationHandle") -> None:
        self._handles[handle.alloc_id] = handle

    def _on_moved(self, event) -> None:
        _, msg = event
        if msg.get("all"):  # the GVAT was rebuilt after a restart of the scheduler
            if msg.get("owner") == self._client_id:
                self.all_stale()
            return
        handle = self._handles.get(msg["alloc_id"])
        # A move whose chunk map the handle has already (its own ``migrate``'s answer, which
        # may come before the event) leaves it fresh: no extra request at its next use.
        moves = msg.get("moves", 0)  # (0: an event that does not say, a promotion's)
        if handle is not None and (not moves or moves > handle.moves_known):
            handle.stale = True

    def live(self) -> list:
        """The handles not freed."""
        return [h for h in self.held() if not h.freed]

    def held(self) -> list:
        """Every handle held, freed ones too (those kept for reuse count as freed)."""
        return list(self._handles.values())

    def all_stale(self) -> None:
        """Mark every chunk map stale, those of allocations kept for reuse too: the GVAT
        moved chunks of this client, and its events may still be on their way."""
        for h in self.held():
            h.stale = True


def live_allocations(client: Client) -> list:
    """The allocations of ``client`` this process still holds and has not freed."""
    return session_of(client).part(LiveAllocations).live()


class AllocationHandle:
    """A live allocation in the GVAT, seen from the user's process (the GVAT's own record
    of it is ``dgvm.gvat.table.Allocation``)."""

    def __init__(self, client: Client, chunk_map: ChunkMap):
        self.client = client
        self.session = session_of(client)
        self.owner = client.id
        self.alloc_id: int = chunk_map.alloc_id
        self.vaddr: int = chunk_map.vaddr
        self.nbytes: int = chunk_map.nbytes
        self.freed = False
        # True once the GVAT said a chunk moved: the next use fetches a fresh chunk map.
        # (A use that races with the news still lands: workers forward or say "moved".)
        self.stale = False
        self.moves_known = 0  # the allocation's moves its chunk map holds (``Migrated.moves``)
        # The tasks that write and read the memory: new ones follow them
        # (dgvm.client.dispatch); a reused allocation's new array follows the old one's.
        self.pending = Pending()
        self.reusable = False  # an operation's result, kept for reuse once released
        # Writes from the caller (``put``) and ``map_chunks`` calls: an array's lineage ends
        # at one (``dgvm.array._engine.lineage``).
        self.writes = 0
        self._set_map(chunk_map)
        self.session.part(LiveAllocations).add(self)

    @classmethod
    def create(cls, client: Client | None = None, **request) -> "AllocationHandle":
        client = client_or_current(client)
        return cls(client, call_scheduler(messages.ALLOCATE, client, owner=client.id, **request))

    def _set_map(self, m: ChunkMap) -> None:
        self.offsets = np.asarray(m.offsets, dtype=np.int64)
        self._home = np.asarray(m.home, dtype=np.int64)
        self._workers = list(m.workers)
        self._devices = list(m.devices)
        self._tiers = list(m.tiers)
        self._versions = list(m.versions)
        self._grouped: dict[str, list[int]] | None = None  # by_home(), made when first asked
        # The scheduler whose GVAT gave this map: one that restarted since rebuilt its GVAT
        # from the workers' reports, and chunks no worker reported are lost.
        self._scheduler = dask_compat.scheduler_id(self.client)

    def set_replicas(self, replicas: int) -> None:
        """Keep ``replicas`` copies of every chunk from now on (the new ones are copied
        before this returns; all or nothing)."""
        self.check_live()
        replicas = arguments.integer("replicas", replicas, 1)
        self._set_map(call_scheduler(messages.SET_REPLICAS, self.client, alloc_id=self.alloc_id,
                                     replicas=replicas, owner=self.client.id))
        self.stale = False

    def refresh(self) -> None:
        """Fetch the current chunk map from the GVAT (after chunks moved)."""
        self.check_live()
        self.stale = False
        self._set_map(call_scheduler(messages.CHUNK_MAP, self.client, alloc_id=self.alloc_id))

    def ensure_fresh(self) -> None:
        """Refresh the chunk map if the GVAT said chunks moved since it was fetched, or
        the scheduler restarted since."""
        if (self.stale or self._scheduler != dask_compat.scheduler_id(self.client)) and not self.freed:
            self.refresh()

    def migrate(self, indices, worker: str) -> list[int]:
        """Move the home of chunks ``indices`` to ``worker``; returns those that moved.
        The old homes free their copies in the background, before their next task."""
        self.check_live()
        # (the GVAT names indices out of range: InvalidAddress)
        indices = arguments.integers("indices", indices, -arguments.INT64_MAX, arguments.INT64_MAX)
        worker = arguments.text("worker", worker)
        migrated = call_scheduler(
            messages.MIGRATE, self.client, alloc_id=self.alloc_id,
            indices=indices, worker=worker, owner=self.owner,
        )
        self.stale = False
        self.moves_known = max(self.moves_known, migrated.moves)
        self._set_map(migrated.map)
        return list(migrated.moved)

    @property
    def nchunks(self) -> int:
        return len(self._home)

    def home(self, index: int) -> str:
        return self._workers[self._home[index]]

    def backends(self) -> set[str]:
        """The backends of the devices its chunks live on (``"cpu"``, ``"cuda"``)."""
        self.ensure_fresh()
        return {d.split(":")[0] for d in self._devices}

    def homes(self) -> list[str]:
        """The home worker of every chunk, from a fresh chunk map."""
        self.ensure_fresh()
        return [self._workers[h] for h in self._home.tolist()]

    def by_home(self, indices=None) -> dict[str, list[int]]:
        """Home worker -> chunk indices (all chunks, or ``indices``) homed there."""
        self.ensure_fresh()
        if indices is None:
            # Every launch asks this of its output: grouped once per chunk map.
            if self._grouped is None:
                order = np.argsort(self._home, kind="stable")
                cuts = np.flatnonzero(np.diff(self._home[order])) + 1
                self._grouped = {}
                for group in np.split(order, cuts):
                    self._grouped.setdefault(self.home(int(group[0])), []).extend(group.tolist())
            return {w: list(idx) for w, idx in self._grouped.items()}
        out: dict[str, list[int]] = defaultdict(list)
        for i in indices:
            out[self.home(i)].append(i)
        return dict(out)

    @property
    def chunks(self) -> list[ChunkInfo]:
        self.ensure_fresh()
        off = self.offsets
        return [
            ChunkInfo(
                index=i,
                vaddr=self.vaddr + int(off[i]),
                nbytes=int(off[i + 1] - off[i]),
                worker=self._workers[h],
                device=self._devices[h],
                tier=self._tiers[h],
                version=int(self._versions[i]),
            )
            for i, h in enumerate(self._home.tolist())
        ]

    def check_live(self) -> None:
        """Raise ``InvalidAddress`` if the allocation was freed."""
        if self.freed:
            raise InvalidAddress(f"allocation {self.alloc_id} at {self.vaddr:#x} was freed")

    def hand_over(self) -> "AllocationHandle":
        """A new handle of this allocation that takes over its life (and its pending
        tasks): this one counts as freed from now on, the memory stays until the new
        one is freed."""
        heir = copy.copy(self)
        self.freed = True
        self.session.part(LiveAllocations).add(heir)  # the GVAT's news of moves go to it
        return heir

    def free(self) -> None:
        """Release the allocation's device memory and virtual range."""
        if self.freed:
            raise InvalidAddress(f"allocation {self.alloc_id} at {self.vaddr:#x} was freed already (double free)")
        if is_closed(self.client):  # the memory went with the cluster: nothing to give back
            self.freed = True
            return
        try:
            call_scheduler(messages.FREE, self.client, alloc_id=self.alloc_id, owner=self.owner)
        except InvalidAddress:  # freed elsewhere meanwhile
            self.freed = True
            raise
        self.freed = True

    # -- moving pieces -------------------------------------------------------------------
    def _route(self, pieces) -> tuple[dict, dict]:
        """Group pieces by home worker: ({worker: [piece]}, {worker: [position]})."""
        by_worker, order = defaultdict(list), defaultdict(list)
        lost: dict[str, list[int]] = defaultdict(list)
        for k, piece in enumerate(pieces):
            h = self._home[piece[0]]
            if self._tiers[h] == "lost":
                lost[self._workers[h]].append(int(piece[0]))
                continue
            by_worker[self._workers[h]].append(list(piece))
            order[self._workers[h]].append(k)
        if lost:
            raise ChunkLost("; ".join(
                f"chunks {sorted(set(idx))} of allocation {self.alloc_id} were on worker {w}, "
                "which left the cluster" for w, idx in lost.items()
            ))
        return by_worker, order

    def _exchange(self, handler: str, pieces) -> tuple[dict, dict]:
        """Send ``pieces`` to their home workers, one request per worker; answers and
        positions by worker. A chunk that moved meanwhile, or whose home left and a copy
        took over (``replicas``), is sent again to its new home (a few times: moves may
        keep coming; writing a piece again writes the same bytes)."""
        self.ensure_fresh()
        for attempt in range(MOVED_RETRIES):
            by_worker, order = self._route(pieces)
            routed = [self.home(p[0]) for p in pieces]  # the homes this attempt asked
            requests = {
                w: dict(alloc_id=self.alloc_id, owner=self.owner, pieces=p)
                for w, p in by_worker.items()
            }
            try:
                return call_workers(handler, requests, self.client), order
            except (OSError, ConnectionBroke) as e:
                if not broken_connection(e):  # refused (AccessDenied): the answer itself
                    raise
                # A worker went away: once the GVAT says so, name the lost chunks (a
                # request that raced with its death fails before the scheduler knows;
                # one that a closing worker served answers ConnectionBroke).
                self.session.part(LeftWorkers).wait_left(by_worker, LEFT_WAIT)
                self.refresh()  # (after copies of its chunks became their homes)
                self._route(pieces)
                if attempt == MOVED_RETRIES - 1 or routed == [self.home(p[0]) for p in pieces]:
                    raise
            except InvalidAddress:
                self.refresh()
                if attempt == MOVED_RETRIES - 1 or routed == [self.home(p[0]) for p in pieces]:
                    raise

    def put(self, pieces: list[tuple[int, int, np.ndarray]]) -> None:
        """Write (chunk index, byte offset, host bytes) pieces, one request per worker."""
        self.check_live()
        self.writes += 1
        self.pending.last.clear()  # (no task is the last writer of these chunks any more)
        self._exchange(messages.WRITE, [(i, o, to_serialize(d)) for i, o, d in pieces])

    def get(self, pieces: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """Read (chunk index, byte offset, length) pieces -> host uint8 arrays, in order."""
        self.check_live()
        answers, order = self._exchange(messages.READ, pieces)
        out: list = [None] * len(pieces)
        for w, arrays in answers.items():
            for k, a in zip(order[w], arrays):
                out[k] = a
        return out
