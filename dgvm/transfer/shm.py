"""``cpu`` same host: map the holder's shared-memory arena and copy the chunk once."""

from __future__ import annotations

import numpy as np
from multiprocessing import shared_memory

from dgvm.transfer.base import TransferPath

_open: dict[str, shared_memory.SharedMemory] = {}  # arenas of peers, mapped once


def _peer_arena(name: str) -> np.ndarray:
    from dgvm.backends.cpu import own_arenas

    shm = own_arenas.get(name) or _open.get(name)
    if shm is None:
        try:  # Python >= 3.13: mapping a peer's arena must not register it for cleanup
            shm = shared_memory.SharedMemory(name=name, track=False)
        except TypeError:
            shm = shared_memory.SharedMemory(name=name)
            from multiprocessing import resource_tracker

            resource_tracker.unregister(shm._name, "shared_memory")
        _open[name] = shm
    return np.ndarray((shm.size,), dtype=np.uint8, buffer=shm.buf)


class SharedMemoryPath(TransferPath):
    name = "shm"

    def usable(self, src, dst):
        return src.backend == dst.backend == "cpu" and src.host == dst.host

    def export(self, store, alloc_id, index):
        c = store.chunk(alloc_id, index, None)
        return {"shm": store.backend.shm_name, "offset": int(c.handle), "nbytes": c.nbytes}

    def fetch_into(self, desc, dst):
        dst[:] = _peer_arena(desc["shm"])[desc["offset"] : desc["offset"] + desc["nbytes"]]
