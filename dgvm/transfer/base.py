"""Transfer paths: how a chunk's bytes get from its holder to another worker.

A path has two halves. ``export`` runs on the holder and returns a small, msgpack-able
descriptor (or the bytes themselves, for the comm path); ``fetch`` runs on the receiver and
copies the chunk into a buffer of the receiver's backend. The GVAT picks the path for each
pair of workers (``choose``); adding a path is a new class in ``PATHS``.
"""

from __future__ import annotations

import abc
from typing import Any

from dgvm.records import DeviceProfile


class TransferPath(abc.ABC):
    name = ""

    @abc.abstractmethod
    def usable(self, src: DeviceProfile, dst: DeviceProfile) -> bool:
        """Can this path move a chunk from a worker like ``src`` to one like ``dst``?"""

    @abc.abstractmethod
    def export(self, store, alloc_id: int, index: int) -> dict:
        """On the holder: what the receiver needs to copy chunk ``index``."""

    @abc.abstractmethod
    def fetch(self, desc: dict, backend) -> Any:
        """On the receiver: a new buffer handle of ``backend`` holding the chunk's bytes."""
