"""Typed records that cross module and process boundaries.

They travel between the scheduler, workers and clients as plain dicts (``to_dict`` /
``from_dict``), so that no pickled class has to match on both sides of a comm.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NewType

AllocId = NewType("AllocId", int)
WorkerUid = NewType("WorkerUid", int)

# Tiers a chunk can live in. Only "device" is used until memory tiering lands; "lost"
# marks a chunk whose home worker left the cluster.
TIERS = ("device", "host", "disk", "lost")


class _Record:
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class ChunkInfo(_Record):
    """Where one chunk of an allocation lives."""

    index: int
    vaddr: int
    nbytes: int
    worker: str
    device: str
    tier: str
    version: int = 0


@dataclass(frozen=True)
class Location(_Record):
    """The answer of ``dgvm.translate``: which chunk holds a virtual address."""

    alloc_id: int
    chunk_index: int
    worker: str
    device: str
    offset: int
    tier: str = "device"


@dataclass(frozen=True)
class DeviceProfile(_Record):
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
class WorkerInfo(_Record):
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
class AllocationInfo(_Record):
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

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        if d.get("shape") is not None:
            d["shape"] = tuple(d["shape"])
        d["chunks"] = tuple(ChunkInfo.from_dict(c) for c in d.get("chunks") or ())
        return super().from_dict.__func__(cls, d)
