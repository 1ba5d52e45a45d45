"""The ``cpu`` backend: NumPy memory standing in for a device of a configured capacity.

All of a worker's chunks live in one POSIX shared-memory arena of ``capacity`` bytes, so a
same-host peer can later map a chunk and copy it once, with no serialization. The arena is
sparse: pages cost memory only once written.
"""

from __future__ import annotations

import os
import time
import uuid
import weakref
from multiprocessing import resource_tracker, shared_memory

import _posixshmem  # POSIX shared memory, as multiprocessing.shared_memory uses it

import numpy as np

from dgvm import config
from dgvm.backends.base import Backend
from dgvm.backends.numba_compat import follow_numba_num_threads
from dgvm.gvat.ranges import RangeAllocator, align_up

_ALIGN = 256  # bytes; keeps every chunk view aligned for any dtype and SIMD


def _open_arena(size: int) -> shared_memory.SharedMemory:
    # The worker owns the segment, not the resource tracker: it unlinks it when it closes,
    # and the scheduler when the worker's process died (dgvm.scheduler.departures).
    name = f"dgvm-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:  # Python >= 3.13
        return shared_memory.SharedMemory(name=name, create=True, size=size, track=False)
    except TypeError:
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        # Else the tracker unlinks it again at exit, and warns that it was gone.
        resource_tracker.unregister("/" + shm.name, "shared_memory")
        return shm


def unlink_arena(name: str) -> bool:
    """Unlink the shared-memory arena ``name`` if it exists on this host (its worker's
    process died before it could); True if it did. Never raises: best effort."""
    try:
        _posixshmem.shm_unlink("/" + name)  # what SharedMemory.unlink calls, without mapping it
    except OSError:  # not here (another host, or unlinked already)
        return False
    return True


def _close_arena(shm: shared_memory.SharedMemory) -> None:
    try:
        shm.close()
    except BufferError:  # a view is still alive; the mapping goes with the process
        pass
    unlink_arena(shm.name)  # not shm.unlink(): the tracker does not know it


class CpuBackend(Backend):
    name = "cpu"
    xp = np

    def _init_device(self, capacity):
        follow_numba_num_threads()

        if capacity is None:
            capacity = config.get_bytes("cpu-default-memory")
        self._shm = _open_arena(capacity)
        self._finalizer = weakref.finalize(self, _close_arena, self._shm)
        self._arena = np.ndarray((capacity,), dtype=np.uint8, buffer=self._shm.buf)
        # Offsets start at _ALIGN so that offset 0 never names a buffer; a tail shorter
        # than _ALIGN holds no buffer either.
        usable = (capacity - _ALIGN) // _ALIGN * _ALIGN
        if usable <= 0:
            raise ValueError(f"a cpu device needs more than {2 * _ALIGN} bytes, got {capacity}")
        self._ranges = RangeAllocator(_ALIGN, usable, alignment=_ALIGN)
        self._high = _ALIGN  # bytes at and above this offset were never handed out
        return usable

    @property
    def shm_name(self) -> str:
        """Name of the shared-memory arena, for same-host peers (which map it themselves,
        also a peer in this process: ``transfer.shm.PeerArenas``)."""
        return self._shm.name

    def footprint(self, nbytes: int) -> int:
        """Every buffer starts on an _ALIGN boundary: it takes whole _ALIGN-byte blocks."""
        return align_up(nbytes, _ALIGN)

    def _allocate(self, nbytes, zero):
        start = self._ranges.allocate(nbytes)
        if start is None:
            r = self._ranges
            raise MemoryError(
                f"{nbytes} bytes asked, taking {self.footprint(nbytes)} in {_ALIGN}-byte blocks; "
                f"the arena of {self.capacity} bytes has no hole that large: {r.free_total} bytes "
                f"free in {r.holes} pieces, the largest {r.largest_hole}"
            )
        # A fresh arena reads as zero: only bytes below the high-water mark were used
        # before and need zeroing (touching fresh pages would cost a page fault each).
        end = start + nbytes
        if zero and start < self._high:
            self._arena[start : min(end, self._high)] = 0
        self._high = max(self._high, end)
        return start

    def _free(self, handle):
        self._ranges.free(handle)

    def view(self, handle, nbytes):
        return self._arena[handle : handle + nbytes]

    def device_info(self):
        return "cpu", "cpu", 0

    def measure_bandwidth(self, nbytes):
        a = np.ones(nbytes, dtype=np.uint8)
        b = np.empty_like(a)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            np.copyto(b, a)
            best = min(best, time.perf_counter() - t0)
        return 2 * nbytes / best

    def close(self):
        self._arena = None
        self._finalizer()
