"""The interface every device backend implements.

A backend owns one worker's device memory: it hands out zero-filled buffers of n bytes,
views them as arrays of its own kind (NumPy or CuPy), copies host bytes in and out, and
measures the device once at start. Everything above it (the chunk store, the GVAT,
``dgvm.array``) is written against this interface only.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any

import numpy as np

from dgvm import config
from dgvm.backends.queued_work import QueuedWork
from dgvm.protocol.records import DeviceProfile


class Backend(abc.ABC):
    """One worker's device memory."""

    #: registry name, e.g. "cpu" or "cuda"
    name: str = ""
    #: the array module of views: numpy or cupy
    xp: Any = np
    #: all of this worker's device work and copies run in order on one stream, so a task
    #: may leave its work running (``dgvm.backends.queued_work``)
    one_stream: bool = True
    # Whether a fault in user code can end the device context (``context_lost``).
    may_lose_context: bool = False
    context_ended: bool = False  # a fault ended it (set by ``dgvm.worker.context_loss``)

    def __init__(self, capacity: int | None = None, speed: float | None = None):
        self.speed = speed
        self.used = 0  # bytes of the buffers handed out
        self.padding = 0  # bytes they take beyond that (``footprint``): not free either
        self.capacity = self._init_device(capacity)
        #: bytes an operation's temporaries may take at once (``working_memory``)
        self.working_memory = working_memory_of(self.capacity)
        #: work tasks queued and left running (``dgvm.backends.queued_work``)
        self.queued = QueuedWork(self.record_event)

    # -- to implement ------------------------------------------------------------------
    @abc.abstractmethod
    def _init_device(self, capacity: int | None) -> int:
        """Open the device; return the capacity dgvm may use (bytes)."""

    @abc.abstractmethod
    def _allocate(self, nbytes: int, zero: bool) -> Any:
        """Return a raw buffer handle of ``nbytes`` (zero-filled if ``zero``) or raise
        MemoryError."""

    @abc.abstractmethod
    def _free(self, handle: Any) -> None: ...

    @abc.abstractmethod
    def view(self, handle: Any, nbytes: int):
        """A 1-D uint8 array (of ``xp``) over the whole buffer, without copying."""

    @abc.abstractmethod
    def device_info(self) -> tuple[str, str, int]:
        """(device id such as "cuda:1", device name, SM count or 0)."""

    @abc.abstractmethod
    def measure_bandwidth(self, nbytes: int) -> float:
        """Device memory bandwidth in bytes/s, counting bytes read plus written."""

    # -- shared ------------------------------------------------------------------------
    @property
    def free(self) -> int:
        return self.capacity - self.used - self.padding - self.other_used()

    def other_used(self) -> int:
        """Bytes of the device used by something other than dgvm."""
        return 0

    def memory_state(self) -> tuple[int, int, int]:
        """(other_used, device total, device free) for a heartbeat, read once."""
        return (self.other_used(), *self.device_memory())

    def device_memory(self) -> tuple[int, int]:
        """(total, free) bytes of the whole device, whoever uses it. An emulated device
        is dgvm's capacity, of which others use ``other_used``."""
        return self.capacity, self.free

    def working_budget(self) -> int:
        """Bytes of working memory an operation may take now (``working_memory``)."""
        return self.working_memory

    def retrying_allocations(self):
        """A scope in which an allocation of the backend's array module that finds the
        device full frees what dgvm and the module keep cached and tries once more."""
        return contextlib.nullcontext()

    def footprint(self, nbytes: int) -> int:
        """The device bytes a buffer of ``nbytes`` takes (more where buffers are aligned):
        what ``free`` must hold; ``used`` counts ``nbytes``, ``padding`` the rest."""
        return nbytes

    def allocate(self, nbytes: int, zero: bool = True, free: int | None = None) -> Any:
        """A buffer of ``nbytes``, zero-filled unless ``zero=False`` (the caller overwrites
        it whole); MemoryError when the device is full. ``free``: the caller's figure of
        ``self.free`` (read once for many chunks: on cuda it asks the driver)."""
        free = self.free if free is None else free
        need = self.footprint(nbytes)
        if need > free:
            takes = f" (taking {need})" if need != nbytes else ""
            raise MemoryError(f"{nbytes} bytes asked{takes}, {free} of {self.capacity} free")
        handle = self._allocate(nbytes, zero)
        self.used += nbytes
        self.padding += need - nbytes
        return handle

    def release(self, handle: Any, nbytes: int) -> None:
        self._free(handle)
        self.used -= nbytes
        self.padding -= self.footprint(nbytes) - nbytes

    def write(self, handle: Any, nbytes: int, offset: int, data: np.ndarray) -> None:
        """Copy host bytes ``data`` (uint8, 1-D) into the buffer at ``offset``."""
        self.view(handle, nbytes)[offset : offset + data.size] = self.xp.asarray(data)

    def read(self, handle: Any, nbytes: int, offset: int, length: int) -> np.ndarray:
        """Copy ``length`` bytes at ``offset`` out to a new host uint8 array."""
        return np.array(self.view(handle, nbytes)[offset : offset + length], copy=True)

    def read_after(self, handle: Any, nbytes: int, offset: int, length: int, written) -> np.ndarray:
        """``read``, of a chunk whose last write queued ``written`` (a ``record_event``;
        None: no write known, read after all queued work): on cuda on a stream of its own
        that waits for that write only, not for other work queued on the device meanwhile."""
        return self.read(handle, nbytes, offset, length)

    def written_out(self, written) -> bool:
        """Has the write ``written`` (a ``record_event``; None: none known) run, so that
        ``read_after`` waits for no device work? Always, where work runs as it is queued
        (``record_event`` gives None); a backend that queues work says otherwise."""
        return True

    def to_host(self, array) -> np.ndarray:
        """The bytes of a device array (of ``xp``) as a new host uint8 array."""
        a = array.get() if hasattr(array, "get") else np.array(array, copy=True)
        return np.ascontiguousarray(a).reshape(-1).view(np.uint8)

    def synchronize(self) -> None:
        """Wait for the device to finish queued work (no-op on cpu). The work tasks left
        running has run then, and is forgotten: every wait counts, whoever asks."""
        self.queued.synchronized(self._device_synchronize)

    def _device_synchronize(self) -> None:
        """The device's own wait for everything queued on it."""

    def context_lost(self) -> bool:
        """Did a fault end this process's device context, so that no later call on the
        device can succeed (``dgvm.worker.context_loss``)? Waits for the device."""
        return False

    def record_event(self):
        """An event that completes when the work queued so far has run (``.done``,
        ``.synchronize()``); None where work runs as it is queued (cpu)."""
        return None

    def close(self) -> None:
        """Give the device memory back."""

    def profile(self, nbytes: int, host: str = "") -> DeviceProfile:
        device, name, sms = self.device_info()
        return DeviceProfile(
            backend=self.name,
            device=device,
            name=name,
            capacity=self.capacity,
            bandwidth=self.measure_bandwidth(nbytes),
            sm_count=sms,
            speed=self.speed,
            host=host,
        )


def working_memory_of(capacity: int) -> int:
    """The working-memory budget of a device of ``capacity`` bytes: ``dgvm.working-memory``,
    or ``placement.headroom`` x ``capacity`` when that is null (at least 1 MiB)."""
    value = config.get_bytes("working-memory")
    if value is None:
        value = int(float(config.get("placement.headroom")) * capacity)
    return max(int(value), 1 << 20)
