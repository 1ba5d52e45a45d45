"""Typed ids and the records that cross module and process boundaries.

Records travel between the scheduler, workers and clients as plain dicts (``to_dict`` /
``from_dict``), so that no pickled class has to match on both sides of a comm; the one
exception is ``ArraySpec``, which travels inside Dask tasks (pickled with them).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass
from typing import Any, NewType

from dgvm.protocol import chunk_grid

#: an allocation's id in the GVAT (never reused)
AllocId = NewType("AllocId", int)
#: one registration of a worker in the GVAT's inventory (a worker that comes back at the
#: same address gets a new one)
WorkerUid = NewType("WorkerUid", int)
#: a worker's Dask address, e.g. "tcp://10.0.0.1:40123"
WorkerAddress = NewType("WorkerAddress", str)
#: a Dask client's id: the owner of the allocations it made
ClientId = NewType("ClientId", str)
#: a chunk's number in its allocation (an array's block, in C order of the grid)
ChunkIndex = NewType("ChunkIndex", int)
#: the number of a release the scheduler sent to a worker (``dgvm.scheduler.releases``);
#: they only grow
ReleaseTicket = NewType("ReleaseTicket", int)

# Tiers a chunk can live in. Only "device" is used until memory tiering lands; "lost"
# marks a chunk whose home worker left the cluster.
TIERS = ("device", "host", "disk", "lost")


class Record:
    """A frozen dataclass that travels as a dict: ``to_dict`` on the sending side,
    ``from_dict`` (which ignores keys it does not know) on the receiving one."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        names = _field_names(cls)
        return cls(**{k: v for k, v in d.items() if k in names})


class FlatRecord(Record):
    """A record whose fields are plain values or lists of them: ``to_dict`` copies
    nothing (``asdict`` would copy every element of a 100,000-chunk column)."""

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _field_names(type(self))}


@functools.cache
def _field_names(cls) -> frozenset:
    return frozenset(f.name for f in dataclasses.fields(cls))




@dataclass(frozen=True)
class ChunkInfo(Record):
    """Where one chunk of an allocation lives."""

    index: int
    vaddr: int
    nbytes: int
    worker: str
    device: str
    tier: str
    version: int = 0
    backups: tuple = ()  # workers holding a durable copy (``replicas``), current as the home


@dataclass(frozen=True)
class Location(Record):
    """The answer of ``dgvm.translate``: which chunk holds a virtual address."""

    alloc_id: int
    chunk_index: int
    worker: str
    device: str
    offset: int
    tier: str = "device"


@dataclass(frozen=True)
class DeviceProfile(Record):
    """What a worker measured about its device at start."""

    backend: str
    device: str  # e.g. "cuda:1" or "cpu"
    name: str  # e.g. "NVIDIA H200" or "cpu"
    capacity: int  # bytes of device memory dgvm may use
    bandwidth: float  # measured device memory bandwidth, bytes/s (read + write)
    sm_count: int = 0
    speed: float | None = None  # configured relative speed; None means "use measured"
    host: str = ""


@dataclass(frozen=True)
class WorkerInfo(Record):
    """A row of ``dgvm.workers()``."""

    address: str
    backend: str
    device: str
    name: str
    capacity: int
    used: int
    free: int
    other_used: int
    chunks: int
    bandwidth: float
    sm_count: int
    speed: float
    status: str = "running"


@dataclass(frozen=True)
class AllocationMeta(Record):
    """What a worker keeps of each allocation it holds chunks of, besides the chunks: what
    a scheduler that restarted needs to put it back in its GVAT (``dgvm.scheduler.rebuild``).
    The size of each chunk follows from ``grid_chunks`` and ``dtype`` (an array) or from
    ``chunk_bytes`` and ``nbytes`` (every chunk that size, the last one the rest)."""

    vaddr: int
    nbytes: int
    nchunks: int
    chunk_bytes: int
    placement: str
    created: float
    copies: int = 1
    dtype: str | None = None
    shape: tuple | None = None
    grid_chunks: tuple | None = None
    # the GVAT (``GVATPlugin.token``) that gave it out, or took it back after a restart
    scheduler: str = ""

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        for key in ("shape", "grid_chunks"):
            if d.get(key) is not None:
                d[key] = tuple(tuple(v) if isinstance(v, list) else v for v in d[key])
        return super().from_dict(d)


@dataclass(frozen=True)
class AllocationInfo(Record):
    """A row of ``dgvm.table()``: one allocation and its chunks."""

    alloc_id: int
    owner: str
    vaddr: int
    nbytes: int
    chunk_bytes: int
    nchunks: int
    placement: str
    created: float
    dtype: str | None = None
    shape: tuple | None = None
    chunks: tuple = ()  # ChunkInfo dicts, filled when asked for
    copies: int = 1  # copies kept of each chunk (``replicas=k``: the home and k - 1 backups)

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        if d.get("shape") is not None:
            d["shape"] = tuple(d["shape"])
        d["chunks"] = tuple(ChunkInfo.from_dict({**c, "backups": tuple(c.get("backups") or ())})
                            for c in d.get("chunks") or ())
        return super().from_dict(d)


@dataclass(frozen=True)
class ArraySpec:
    """What a task needs to know of a DArray argument (no handle, no client): sent from
    the client to workers inside the tasks that use the array.

    A task asks the same questions of its specs for every chunk it runs (a chunk's place
    in the grid, its bounds, the chunks a region overlaps): the grid and the block edges
    are kept on the spec as Python ints, where NumPy's scalar calls would cost
    microseconds each, per chunk. They stay where they were made (``__getstate__``)."""

    alloc_id: AllocId
    owner: ClientId
    shape: tuple
    dtype: str
    chunks: tuple

    @classmethod
    def of(cls, x) -> "ArraySpec":
        """The spec of an array ``x`` (``alloc_id``, ``alloc.owner``, ``shape``,
        ``dtype``, ``chunks``)."""
        return cls(x.alloc_id, x.alloc.owner, x.shape, x.dtype.str, x.chunks)

    def __getstate__(self):
        return {f: self.__dict__[f] for f in ("alloc_id", "owner", "shape", "dtype", "chunks")}

    def __setstate__(self, state):
        self.__dict__.update(state)

    @functools.cached_property
    def grid(self) -> tuple:
        return chunk_grid.grid_shape(self.chunks)

    @functools.cached_property
    def _edges(self) -> list[list[int]]:
        return [[0, *itertools.accumulate(int(c) for c in axis)] for axis in self.chunks]

    def edges(self, axis: int) -> list[int]:
        """Block start offsets along ``axis``, and the axis length last."""
        return self._edges[axis]

    def block(self, k: int) -> tuple:
        """The grid position of chunk ``k`` (C order)."""
        return chunk_grid.block_index(k, self.grid)

    def index(self, block) -> int:
        """The chunk at grid position ``block``."""
        return chunk_grid.flat_index(block, self.grid)

    def bounds(self, k: int) -> tuple[list, list]:
        """Chunk ``k``'s global element range ``[lo, hi)`` per axis."""
        block = self.block(k)
        return ([self.edges(a)[b] for a, b in enumerate(block)],
                [self.edges(a)[b + 1] for a, b in enumerate(block)])

    def block_shape(self, block: tuple) -> tuple:
        return tuple(self.chunks[a][b] for a, b in enumerate(block))
