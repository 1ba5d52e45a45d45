"""Transfer paths between workers, and the choice of one for a pair of workers."""

from __future__ import annotations

from dgvm import config
from dgvm.protocol.records import DeviceProfile
from dgvm.transfer.base import TransferPath
from dgvm.transfer.comm import CommPath
from dgvm.transfer.cuda_ipc import CudaIpcPath
from dgvm.transfer.shm import SharedMemoryPath

PATHS: dict[str, TransferPath] = {p.name: p for p in (CudaIpcPath(), SharedMemoryPath(), CommPath())}


def choose(src: DeviceProfile, dst: DeviceProfile) -> str:
    """The fastest usable path: same-host paths first unless turned off in config."""
    same_host = config.get("transfer.same-host")
    for name, path in PATHS.items():
        if name != "comm" and not same_host:
            continue
        if path.usable(src, dst):
            return name
    return "comm"


__all__ = ["PATHS", "TransferPath", "choose"]
