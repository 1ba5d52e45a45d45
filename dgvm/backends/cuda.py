"""The ``cuda`` backend: CuPy device memory on the worker's GPU.

Each chunk is its own ``cudaMalloc`` (``cupy.cuda.Memory``), not a slice of CuPy's pool,
so that a chunk can later be exported whole through a CUDA IPC handle. dask-cuda gives
each worker one GPU through ``CUDA_VISIBLE_DEVICES``, so the current device is device 0.

Freed chunk buffers are kept (up to ``CACHE_FRACTION`` of the capacity) and handed out
again to the next chunk of the same size: NumPy-style loops free one result and allocate
the next of the same shape at every step, and ``cudaMalloc``/``cudaFree`` of GiB-sized
buffers cost milliseconds each (``cudaFree`` also waits for the whole device). Cached
buffers count as free memory, and are given back to the driver when an allocation would
otherwise fail.

A buffer a peer opened through CUDA IPC (and keeps mapped, ``transfer.ipc_mappings``) is
not freed before that peer forgot it: it *retires* (``transfer.ipc_exports``).
"""

from __future__ import annotations

import asyncio
import os
import threading

import numpy as np

from dgvm.backends.base import Backend
from dgvm.transfer.ipc_exports import ExportedBuffers


def gpu_count() -> int:
    """Number of visible CUDA devices; 0 when CuPy or a driver is missing."""
    try:
        import cupy  # optional (dgvm[cuda])

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


CACHE_FRACTION = 0.25
RETIRE_WAIT = 10.0  # seconds an allocation waits for exported buffers to be given back


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class CudaBackend(Backend):
    name = "cuda"
    may_lose_context = True  # an illegal address or a trap in a kernel ends it

    def _init_device(self, capacity):
        import cupy  # optional (dgvm[cuda]): only a cuda worker opens the device

        self.xp = cupy
        self._cupy = cupy
        self._device = cupy.cuda.Device()
        self._device.use()
        # Per-thread default streams would let a copy on another thread (a host read, an
        # export) overtake a task's kernels: then every task waits for its own.
        self.one_stream = not any(
            os.environ.get(v, "0") not in ("", "0")
            for v in ("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM")
        )
        free, total = cupy.cuda.runtime.memGetInfo()
        self._total = total
        if capacity is None:
            capacity = total
        self._side = threading.local()  # per thread: a stream for reads (``read_after``)
        self._cache: dict[int, list] = {}  # size -> freed chunk buffers kept for reuse
        self._cached = 0
        self.exports = ExportedBuffers(lambda mem: cupy.cuda.runtime.ipcGetMemHandle(mem.ptr))
        return min(capacity, total)

    def _allocate(self, nbytes, zero):
        cp = self._cupy
        kept = self._cache.get(nbytes)
        if kept:
            mem = kept.pop()
            self._cached -= nbytes
        else:
            try:
                mem = cp.cuda.memory.Memory(nbytes)
            except (cp.cuda.memory.OutOfMemoryError, cp.cuda.runtime.CUDARuntimeError):
                # Freed buffers kept here and CuPy's pool of finished temporaries hold
                # memory nobody uses: give it back to the driver and try once more
                # (exported ones once their importers forgot them).
                self.drop_cache()
                if not _on_event_loop():  # the loop runs the retirement: never wait there
                    self.exports.wait_retired(RETIRE_WAIT)
                try:
                    mem = cp.cuda.memory.Memory(nbytes)
                except (cp.cuda.memory.OutOfMemoryError, cp.cuda.runtime.CUDARuntimeError) as e:
                    raise MemoryError(str(e)) from None
        if zero:
            cp.cuda.runtime.memset(mem.ptr, 0, nbytes)
        return mem

    def _free(self, handle):
        # Kept for the next chunk of this size while the cache has room; otherwise
        # cudaFree runs when the last reference to the Memory goes (the store drops its
        # own; an exported one is kept until its importers forgot it).
        if self._cached + handle.size <= CACHE_FRACTION * self.capacity:
            self._cache.setdefault(handle.size, []).append(handle)
            self._cached += handle.size
        else:
            self.exports.retire(handle.ptr)

    def drop_cache(self) -> None:
        """Give kept chunk buffers and CuPy's cached blocks back to the driver (exported
        ones once their importers forgot them)."""
        kept = [mem for mems in self._cache.values() for mem in mems]
        self._cache.clear()
        self._cached = 0
        for mem in kept:
            self.exports.retire(mem.ptr)
        del kept
        self._cupy.get_default_memory_pool().free_all_blocks()

    def working_budget(self) -> int:
        """The budget, less what the GPU cannot give now (others use it), but never
        below 16 MiB of it: slices that small already cost more in launches than they save."""
        _, free = self.device_memory()
        return max(min(self.working_memory, free), min(self.working_memory, 16 << 20))

    def retrying_allocations(self):
        """CuPy allocations in this thread go through ``_retrying`` (the allocator in use,
        CuPy's pool or another such as RMM's, underneath)."""
        cp = self._cupy
        inner = cp.cuda.get_allocator()

        def allocate(nbytes):
            try:
                return inner(nbytes)
            except cp.cuda.memory.OutOfMemoryError:
                # dgvm's cached chunk buffers and CuPy's pool blocks hold memory nobody
                # uses: give them back to the driver, once.
                self.drop_cache()
                if not _on_event_loop():
                    self.exports.wait_retired(RETIRE_WAIT)
                return inner(nbytes)

        return cp.cuda.using_allocator(allocate)

    def ipc_handle(self, mem, importer: str | None, current=lambda: True) -> bytes | None:
        """The CUDA IPC handle of chunk buffer ``mem``, for worker ``importer``; None if
        ``current()`` says it no longer holds the chunk (see ``ExportedBuffers.handle``)."""
        return self.exports.handle(mem.ptr, mem, mem.size, importer, current)

    def close(self):
        self._cache.clear()
        self._cached = 0
        self.exports.clear()

    def view(self, handle, nbytes):
        cp = self._cupy
        return cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.memory.MemoryPointer(handle, 0))

    def write(self, handle, nbytes, offset, data):
        self.view(handle, nbytes)[offset : offset + data.size].set(np.ascontiguousarray(data))

    def read(self, handle, nbytes, offset, length):
        return self.view(handle, nbytes)[offset : offset + length].get()

    def read_after(self, handle, nbytes, offset, length, written):
        # A neighbour's rows for a stencil step are read while this device runs its own
        # part of the step: on a stream that does not wait for the default one, only
        # for the chunk's last write.
        if not self.one_stream or written is None:  # (no write known: its zero-fill may be queued)
            return self.read(handle, nbytes, offset, length)
        stream = getattr(self._side, "stream", None)
        if stream is None:
            stream = self._side.stream = self._cupy.cuda.Stream(non_blocking=True)
        stream.wait_event(written)
        return self.view(handle, nbytes)[offset : offset + length].get(stream=stream)

    def written_out(self, written):
        # (No write known: its zero-fill may be queued, and a read waits for all work.)
        try:
            return self.one_stream and written is not None and written.done
        except Exception:  # noqa: BLE001  (a fault ended the context: the thread path says so)
            return False

    def other_used(self):
        """The part of dgvm's remaining budget that the GPU cannot actually give, because
        something else (contexts, other programs) holds it. With the whole GPU as capacity,
        this is exactly the memory others use."""
        _, free = self.device_memory()
        return max(0, self.capacity - self.used - free)

    def device_memory(self):
        """Total and free bytes of the GPU. Free counts the chunk buffers kept for reuse and
        the blocks CuPy's pool keeps from this worker's finished temporaries: ``_allocate``
        reuses or returns them when a chunk needs them; they are not another program's."""
        free, total = self._cupy.cuda.runtime.memGetInfo()
        # ... and exported buffers given up, freed once their importers answer.
        reusable = (self._cupy.get_default_memory_pool().free_bytes() + self._cached
                    + self.exports.retiring_bytes())
        return int(total), int(free) + int(reusable)

    def memory_state(self):
        total, free = self.device_memory()  # one memGetInfo per heartbeat
        return max(0, self.capacity - self.used - free), total, free

    def _device_synchronize(self):
        self._device.synchronize()

    def context_lost(self):
        # A sticky error (an illegal address, a trap) fails every later call; one that
        # is not (a launch refused for its resources) was reported once and is gone.
        try:
            self._device.synchronize()
            self._cupy.cuda.runtime.memGetInfo()
        except Exception:  # noqa: BLE001
            return True
        return False

    def record_event(self):
        event = self._cupy.cuda.Event(disable_timing=True)
        event.record()  # on the current stream, which every task and copy of dgvm uses
        return event

    def device_info(self):
        cp = self._cupy
        dev_id = self._device.id
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        first = visible.split(",")[dev_id].strip() if visible else ""
        physical = first if first.isdigit() else str(dev_id)
        props = cp.cuda.runtime.getDeviceProperties(dev_id)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return f"cuda:{physical}", name, int(props["multiProcessorCount"])

    def measure_bandwidth(self, nbytes):
        cp = self._cupy
        nbytes = max(nbytes, 256 * 2**20)  # smaller copies do not reach HBM's rate
        a = cp.ones(nbytes, dtype=cp.uint8)
        b = cp.empty_like(a)
        b[...] = a  # warm up
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        best = float("inf")
        for _ in range(5):
            start.record()
            b[...] = a
            stop.record()
            stop.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(start, stop) / 1e3)
        del a, b
        return 2 * nbytes / best
