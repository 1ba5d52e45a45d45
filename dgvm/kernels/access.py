"""Worker side of a launch: get the chunks a kernel needs, local or fetched.

A chunk held here (home or replica) is a hit. Otherwise it is a miss: the GVAT says where
its home is and which transfer path to use, the chunk is copied here once and kept as a
read replica registered in the GVAT, so the next launch that needs it is a hit.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np
from distributed.utils import sync

from dgvm.errors import ChunkLost, DgvmError
from dgvm.transfer import PATHS


@dataclass
class ArraySpec:
    """What a task needs to know of a DArray argument (no handle, no client)."""

    alloc_id: int
    owner: str
    shape: tuple
    dtype: str
    chunks: tuple

    @classmethod
    def of(cls, x) -> "ArraySpec":
        return cls(x.alloc_id, x.alloc.owner, x.shape, x.dtype.str, x.chunks)

    @property
    def grid(self) -> tuple:
        return tuple(len(c) for c in self.chunks)

    def starts(self, axis: int) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.chunks[axis])]).astype(np.int64)

    def block_shape(self, block: tuple) -> tuple:
        return tuple(self.chunks[a][b] for a, b in enumerate(block))


@dataclass
class Access:
    """One task's view of this worker's store, with its hit and miss counts."""

    worker: object
    store: object
    reads: dict = field(default_factory=dict)  # alloc id -> [hits, misses]

    def chunk(self, spec: ArraySpec, index: int):
        """Chunk ``index`` of ``spec`` as a typed, shaped array of the backend's kind."""
        count = self.reads.setdefault(spec.alloc_id, [0, 0])
        if self.store.local(spec.alloc_id, index) is not None:
            count[0] += 1
            self.store.stats.hits += 1
        else:
            count[1] += 1
            self.store.stats.misses += 1
            self._fetch(spec.alloc_id, index)
        block = np.unravel_index(index, spec.grid) if spec.grid else ()
        raw = self.store.view(spec.alloc_id, index)
        return raw.view(spec.dtype).reshape(spec.block_shape(tuple(int(b) for b in block)))

    def _fetch(self, alloc_id: int, index: int) -> None:
        w = self.worker
        where = sync(w.loop, w.scheduler.dgvm_locate, alloc_id=alloc_id, index=index, worker=w.address)
        if "lost" in where:
            raise ChunkLost(f"chunk {index} of allocation {alloc_id} was on {where['lost']}, which left")
        path = PATHS[where["path"]]
        t0 = time.perf_counter()
        desc = sync(w.loop, w.rpc(where["home"]).dgvm_export, alloc_id=alloc_id, index=index, path=path.name)
        if "data" in desc and hasattr(desc["data"], "header"):  # still serialized
            from distributed.protocol import deserialize

            desc["data"] = deserialize(desc["data"].header, desc["data"].frames)
        try:
            handle = path.fetch(desc, self.store.backend)
        except MemoryError as e:
            from dgvm.errors import OutOfDeviceMemory

            raise OutOfDeviceMemory(
                f"no room on {w.address} for a replica of chunk {index} of allocation "
                f"{alloc_id} ({desc['nbytes']} bytes): {e}"
            ) from None
        seconds = time.perf_counter() - t0
        self.store.add_replica(alloc_id, index, handle, desc["nbytes"], where["version"])
        self.store.stats.moved(path.name, desc["nbytes"], seconds)
        kept = sync(
            w.loop, w.scheduler.dgvm_replica_added, alloc_id=alloc_id, index=index,
            worker=w.address, nbytes=desc["nbytes"], path=path.name, seconds=seconds,
        )
        if not kept:
            self.store.drop_replicas(alloc_id, [index])
            raise DgvmError(f"allocation {alloc_id} was freed while chunk {index} was fetched")

    def with_halo(self, spec: ArraySpec, block: tuple, halo: int, xp):
        """Block ``block`` of ``spec`` extended by up to ``halo`` cells on every side from
        its neighbours (clipped at the array's edge), as a new array."""
        lo, hi = [], []
        for a, b in enumerate(block):
            st = spec.starts(a)
            lo.append(max(0, int(st[b]) - halo))
            hi.append(min(spec.shape[a], int(st[b + 1]) + halo))
        out = xp.empty(tuple(h - l for l, h in zip(lo, hi)), dtype=spec.dtype)
        ranges = []
        for a in range(len(block)):
            st = spec.starts(a)
            first = int(np.searchsorted(st, lo[a], side="right")) - 1
            last = int(np.searchsorted(st, hi[a], side="left")) - 1
            ranges.append(range(first, last + 1))
        for nb in itertools.product(*ranges):
            k = int(np.ravel_multi_index(nb, spec.grid))
            src = self.chunk(spec, k)
            dst_sl, src_sl = [], []
            for a, b in enumerate(nb):
                st = spec.starts(a)
                s0, s1 = max(lo[a], int(st[b])), min(hi[a], int(st[b + 1]))
                dst_sl.append(slice(s0 - lo[a], s1 - lo[a]))
                src_sl.append(slice(s0 - int(st[b]), s1 - int(st[b])))
            out[tuple(dst_sl)] = src[tuple(src_sl)]
        return out
