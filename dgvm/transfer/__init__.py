"""Transfer paths between workers, the choice of one for a pair of workers, and a
worker's own set of them (``Transfers``)."""

from __future__ import annotations

import collections
import threading

from dgvm import config
from dgvm.protocol.records import DeviceProfile
from dgvm.transfer.base import TransferPath
from dgvm.transfer.comm import CommPath
from dgvm.transfer.host import host_id
from dgvm.transfer.cuda_ipc import CudaIpcPath, peer_mappings
from dgvm.transfer.ipc_mappings import ImportedMappings
from dgvm.transfer.left_peers import LeftPeers
from dgvm.transfer.shm import PeerArenas, SharedMemoryPath

#: the kinds of path, fastest first: ``choose`` takes the first usable one
KINDS: tuple[type[TransferPath], ...] = (CudaIpcPath, SharedMemoryPath, CommPath)
#: their names, as the GVAT names a path and the stats and dashboard count them
NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)


def choose(src: DeviceProfile, dst: DeviceProfile) -> str:
    """The fastest usable path: same-host paths first unless turned off in config."""
    same_host = config.get("transfer.same-host")
    for kind in KINDS:
        if kind.name != "comm" and not same_host:
            continue
        if kind.usable(src, dst):
            return kind.name
    return "comm"


HOMES_KEPT = 4096  # chunks whose last known home a worker keeps (``Transfers.homes``)


class Transfers:
    """One worker's transfer paths, by name, and what they keep between copies: its
    mappings of peers' CUDA buffers (``mappings``) and of peers' shared-memory arenas
    (``arenas``), its requests to peers, which stop when one leaves (``left_peers``), and
    where the chunks it read pieces of were homed last (``homes``: a hint; the holder
    answers ``MOVED`` for a chunk it no longer homes). The worker's plugin makes it; a
    process that runs no worker has none."""

    def __init__(self):
        self.mappings: ImportedMappings = peer_mappings()
        self.arenas = PeerArenas()
        self.left_peers = LeftPeers()
        self.homes: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()
        self._homes_lock = threading.Lock()  # (tasks' threads note them)
        self.paths: dict[str, TransferPath] = {
            p.name: p for p in (CudaIpcPath(self.mappings), SharedMemoryPath(self.arenas), CommPath())
        }

    def home_seen(self, key: tuple, where) -> None:
        """Remember ``where`` (the GVAT's answer) for chunk ``key`` (alloc id, index)."""
        with self._homes_lock:
            self.homes[key] = where
            self.homes.move_to_end(key)
            while len(self.homes) > HOMES_KEPT:
                self.homes.popitem(last=False)

    def __getitem__(self, name: str) -> TransferPath:
        return self.paths[name]

    def close(self) -> None:
        """The worker closes: unmap the peers' arenas, end the paths' threads. (Mappings
        of peers' CUDA buffers stay until the peers ask to forget them: they may still ask.)"""
        self.arenas.close()
        for p in self.paths.values():
            p.close()


__all__ = ["KINDS", "NAMES", "LeftPeers", "TransferPath", "Transfers", "choose", "host_id"]
