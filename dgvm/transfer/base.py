"""Transfer paths: how a chunk's bytes get from its holder to another worker.

A path has two halves. ``export`` runs on the holder and returns a small, msgpack-able
descriptor (or the bytes themselves, for the comm path); ``fetch_into`` runs on the receiver
and copies the chunk into a device array of the receiver's backend: a new buffer of its store
(``fetch``, a replica or a new home) or a transient one (a read that keeps no replica). The GVAT picks the path for each
pair of workers (``choose``); adding a path is a new class in ``KINDS``. A worker holds one
instance of each (``Transfers``), with what it keeps between copies. A move of many chunks
fetches them together (``fetch_many``): a path whose copies can overlap (CUDA IPC: queued
on a stream and waited for once; shared memory: copied by several threads) does so.
"""

from __future__ import annotations

import abc
from typing import Any

from dgvm.protocol.records import DeviceProfile
from dgvm.transfer.ipc_mappings import BufferGone


class TransferPath(abc.ABC):
    name = ""
    #: ``export`` reads the chunk's bytes (keep it off the event loop); otherwise it only
    #: describes where they are, and the holder answers at once
    export_reads = False
    #: bytes of one move copied in one ``fetch_many`` call (one hold of the receiving
    #: store's lock); a larger chunk alone
    batch_bytes = 512 << 20

    @staticmethod
    @abc.abstractmethod
    def usable(src: DeviceProfile, dst: DeviceProfile) -> bool:
        """Can this path move a chunk from a worker like ``src`` to one like ``dst``?"""

    @abc.abstractmethod
    def export(self, store, alloc_id: int, index: int, to: str | None = None, span=None) -> dict:
        """On the holder: what the receiver (worker ``to``, when known) needs to copy
        chunk ``index`` (only its bytes ``[start, stop)`` when ``span`` gives them)."""

    @abc.abstractmethod
    def fetch_into(self, desc: dict, dst, start: int = 0) -> float:
        """On the receiver: copy the chunk's bytes from ``start`` on into ``dst``, a 1-D
        uint8 array of the receiver's backend (NumPy or CuPy); the whole chunk when
        ``dst`` has ``desc["nbytes"]``. Returns the seconds the copy itself took (without
        setting it up), for the link figures in the stats."""

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

    def close(self) -> None:
        """The worker closes: let go of what the path keeps (threads)."""

    def fetch_many(self, descs: list, backend) -> list:
        """On the receiver: ``fetch`` each of ``descs``, the copies in flight together where
        the path allows. Returns, per descriptor, (a new buffer handle, seconds of the copy:
        a share by bytes of the copies' time when they overlapped), or None for a chunk whose
        holder freed it after the export (``BufferGone``). A MemoryError gives back every
        buffer made first. This one copies one chunk after another."""
        out: list = []
        try:
            for desc in descs:
                try:
                    out.append(self.fetch(desc, backend))
                except BufferGone:  # freed or moved after the export: the others go on
                    out.append(None)
        except BaseException:
            release_fetched(backend, descs, out)
            raise
        return out


def release_fetched(backend, descs: list, fetched: list) -> None:
    """Give back the buffers ``fetch_many`` made so far (``fetched``: its answers for the
    first descriptors)."""
    for desc, got in zip(descs, fetched):
        if got is not None:
            backend.release(got[0], desc["nbytes"])


def shares(descs: list, seconds: float) -> list[float]:
    """``seconds`` of copies that overlapped, shared among ``descs`` by their bytes."""
    total = sum(d["nbytes"] for d in descs) or 1
    return [seconds * d["nbytes"] / total for d in descs]
