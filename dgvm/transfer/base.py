"""Transfer paths: how a chunk's bytes get from its holder to another worker.

A path has two halves. ``export`` runs on the holder and returns a small, msgpack-able
descriptor (or the bytes themselves, for the comm path); ``fetch_into`` runs on the receiver
and copies the chunk into a device array of the receiver's backend: a new buffer of its store
(``fetch``, a replica or a new home) or a transient one (a read that keeps no replica). The GVAT picks the path for each
pair of workers (``choose``); adding a path is a new class in ``KINDS``. A worker holds one
instance of each (``Transfers``), with what it keeps between copies.
"""

from __future__ import annotations

import abc
from typing import Any

from dgvm.protocol.records import DeviceProfile


class TransferPath(abc.ABC):
    name = ""
    #: ``export`` reads the chunk's bytes (keep it off the event loop); otherwise it only
    #: describes where they are, and the holder answers at once
    export_reads = False

    @staticmethod
    @abc.abstractmethod
    def usable(src: DeviceProfile, dst: DeviceProfile) -> bool:
        """Can this path move a chunk from a worker like ``src`` to one like ``dst``?"""

    @abc.abstractmethod
    def export(self, store, alloc_id: int, index: int, to: str | None = None) -> dict:
        """On the holder: what the receiver (worker ``to``, when known) needs to copy
        chunk ``index``."""

    @abc.abstractmethod
    def fetch_into(self, desc: dict, dst) -> float:
        """On the receiver: copy the chunk into ``dst``, a 1-D uint8 array of the
        receiver's backend (NumPy or CuPy) of ``desc["nbytes"]``. Returns the seconds the
        copy itself took (without setting it up), for the link figures in the stats."""

    def fetch(self, desc: dict, backend) -> tuple[Any, float]:
        """On the receiver: (a new buffer handle of ``backend`` holding the chunk's bytes,
        seconds of the copy); MemoryError when it does not fit."""
        n = desc["nbytes"]
        handle = backend.allocate(n, zero=False)
        try:
            seconds = self.fetch_into(desc, backend.view(handle, n))
            backend.synchronize()
        except BaseException:
            backend.release(handle, n)
            raise
        return handle, seconds
