"""The GVAT's worker inventory: which workers hold dgvm chunk stores, and their devices.

A worker gets a fresh ``WorkerUid`` each time it registers, so chunks homed on a worker
that left stay attached to that (dead) record and read as ``lost``, even if a new worker
later comes up at the same address. Removing a worker is O(1).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from statistics import median

from dgvm.protocol.records import DeviceProfile, WorkerInfo, WorkerUid


@dataclass
class WorkerRecord:
    uid: WorkerUid
    address: str
    profile: DeviceProfile
    alive: bool = True
    used: int = 0  # bytes of chunks homed here, as the GVAT booked them
    chunks: int = 0
    other_used: int = 0  # bytes used on the device by others (from heartbeats)
    load: float = 0.0  # seconds of work queued on the worker (from the Dask scheduler)
    extra: dict = field(default_factory=dict)

    @property
    def free(self) -> int:
        return max(0, self.profile.capacity - self.used - self.other_used)


class Inventory:
    def __init__(self):
        self._uids = itertools.count(1)
        self.by_uid: dict[WorkerUid, WorkerRecord] = {}
        self.by_address: dict[str, WorkerRecord] = {}  # live workers only

    def register(self, address: str, profile: DeviceProfile) -> WorkerRecord:
        old = self.by_address.get(address)
        if old is not None and old.profile == profile:
            return old  # the same worker reporting again
        if old is not None:
            old.alive = False
        rec = WorkerRecord(uid=WorkerUid(next(self._uids)), address=address, profile=profile)
        self.by_uid[rec.uid] = rec
        self.by_address[address] = rec
        return rec

    def remove(self, address: str) -> WorkerRecord | None:
        rec = self.by_address.pop(address, None)
        if rec is not None:
            rec.alive = False
        return rec

    def live(self) -> list[WorkerRecord]:
        return list(self.by_address.values())

    def effective_bandwidth(self, records: list[WorkerRecord]) -> dict[WorkerUid, float]:
        """Bytes/s that placement assumes for each worker.

        Devices of the same model get the median of their measurements, so that noise in
        a start-up benchmark never splits equal GPUs unevenly; a configured relative speed
        scales the median of all measurements (cpu emulation of mixed devices).
        """
        by_name: dict[str, list[float]] = {}
        for r in records:
            by_name.setdefault(r.profile.name, []).append(r.profile.bandwidth)
        overall = median(r.profile.bandwidth for r in records) if records else 1.0
        out = {}
        for r in records:
            if r.profile.speed is not None:
                out[r.uid] = overall * float(r.profile.speed)
            else:
                out[r.uid] = median(by_name[r.profile.name])
        return out

    def info(self, rec: WorkerRecord, speed: float) -> WorkerInfo:
        p = rec.profile
        return WorkerInfo(
            address=rec.address,
            backend=p.backend,
            device=p.device,
            name=p.name,
            capacity=p.capacity,
            used=rec.used,
            free=rec.free,
            other_used=rec.other_used,
            chunks=rec.chunks,
            bandwidth=p.bandwidth,
            sm_count=p.sm_count,
            speed=speed,
            status="running" if rec.alive else "lost",
        )
