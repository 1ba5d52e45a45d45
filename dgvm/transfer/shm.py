"""``cpu`` same host: map the holder's shared-memory arena and copy the chunk once. The
chunks of one move are copied by a few threads at once (``fetch_many``): one thread's
copy does not reach the host's memory bandwidth."""

from __future__ import annotations

import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import _posixshmem
import numpy as np

from dgvm.transfer.base import TransferPath, release_fetched, shares

#: threads that copy the chunks of one move (NumPy's copy lets the GIL go; half the
#: cores at most: the workers' other threads and processes run meanwhile), and the pieces
#: they copy: a move of less than ``PARALLEL_BYTES``, or on fewer than 4 cores, in one pass
COPY_THREADS = min(4, (os.cpu_count() or 1) // 2)
PIECE_BYTES = 8 << 20
PARALLEL_BYTES = 32 << 20


class PeerArenas:
    """The shared-memory arenas of peers one worker has mapped, by name (one per worker,
    ``Transfers.arenas``). A content-keyed cache: an arena is mapped at its first copy and
    kept until its worker leaves (``forget``) or this one closes (``close``); names are
    never reused."""

    def __init__(self):
        self._lock = threading.Lock()
        self._arenas: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        """Arena ``name`` as a uint8 array, mapped now or kept from before."""
        with self._lock:
            arena = self._arenas.get(name)
            if arena is None:
                # Mapped by hand rather than with SharedMemory: before Python 3.13 that
                # would register the peer's arena with the resource tracker the workers
                # share, and unregistering it again would drop the owner's registration too.
                fd = _posixshmem.shm_open("/" + name.lstrip("/"), os.O_RDWR, mode=0o600)
                try:
                    m = mmap.mmap(fd, os.fstat(fd).st_size)
                finally:
                    os.close(fd)
                arena = self._arenas[name] = np.frombuffer(m, dtype=np.uint8)
            return arena

    def forget(self, name: str) -> None:
        """Stop mapping arena ``name`` (its worker left: unlinked, its pages stay while
        any process maps them); unmapped once no copy reads it any more."""
        with self._lock:
            self._arenas.pop(name, None)

    def close(self) -> None:
        """Forget every mapping (each is unmapped once no copy reads it any more)."""
        with self._lock:
            self._arenas.clear()

    def __len__(self) -> int:
        return len(self._arenas)


class SharedMemoryPath(TransferPath):
    name = "shm"

    def __init__(self, arenas: PeerArenas):
        self.arenas = arenas  # this worker's mappings of its peers' arenas
        self._copiers: ThreadPoolExecutor | None = None  # made at the first large move

    @staticmethod
    def usable(src, dst):
        return src.backend == dst.backend == "cpu" and src.host == dst.host

    def export(self, store, alloc_id, index, to=None, span=None):
        c = store.chunk(alloc_id, index, None)
        return {"shm": store.backend.shm_name, "offset": int(c.handle), "nbytes": c.nbytes}

    def fetch_into(self, desc, dst, start=0):
        at = desc["offset"] + start
        src = self.arenas.get(desc["shm"])[at: at + dst.shape[0]]
        t0 = time.perf_counter()
        dst[:] = src
        return time.perf_counter() - t0

    def fetch_many(self, descs, backend):
        if COPY_THREADS < 2 or sum(d["nbytes"] for d in descs) < PARALLEL_BYTES:
            return super().fetch_many(descs, backend)
        out: list = []
        try:
            for desc in descs:  # every buffer first: a full device is found before any copy
                out.append((backend.allocate(desc["nbytes"], zero=False), 0.0))
            pieces = []
            for desc, (handle, _) in zip(descs, out):
                src = self.arenas.get(desc["shm"])[desc["offset"]: desc["offset"] + desc["nbytes"]]
                dst = backend.view(handle, desc["nbytes"])
                pieces += [(dst[at:at + PIECE_BYTES], src[at:at + PIECE_BYTES])
                           for at in range(0, desc["nbytes"], PIECE_BYTES)]
            if self._copiers is None:
                self._copiers = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="dgvm-shm-copy")
            t0 = time.perf_counter()
            copies = [self._copiers.submit(np.copyto, d, s) for d, s in pieces]
            wait(copies)  # all of them, even when one failed: none may write a buffer given back
            for done in copies:
                done.result()
            seconds = shares(descs, time.perf_counter() - t0)
        except BaseException:
            release_fetched(backend, descs, out)
            raise
        return [(handle, s) for (handle, _), s in zip(out, seconds)]

    def close(self) -> None:
        """The worker closes: its copying threads end."""
        if self._copiers is not None:
            self._copiers.shutdown(wait=True)
