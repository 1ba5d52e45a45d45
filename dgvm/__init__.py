"""dgvm: a cluster of GPUs as one very large GPU with one address space, on Dask.

>>> import dgvm
>>> client = dgvm.connect()                 # a local cluster (GPUs if present)
>>> buf = dgvm.malloc(3 * 2**30)            # larger than any one device
>>> buf.write(0, b"hello"); buf.read(0, 5)
>>> dgvm.translate(buf.vaddr + 5)           # which worker holds that byte
"""

from dgvm import config  # noqa: F401  (loads dgvm.yaml into dask.config)
from dgvm.client.buffer import GlobalBuffer, malloc
from dgvm.deploy.cluster import LocalCluster
from dgvm.protocol.errors import (
    AccessDenied,
    ChunkLost,
    ConfigError,
    DgvmError,
    InvalidAddress,
    InvalidArgument,
    InvalidArgumentType,
    KernelError,
    NotConnected,
    NotSupported,
    OutOfDeviceMemory,
)
from dgvm.kernels.blocks import blocks
from dgvm.kernels.kernel import kernel
from dgvm.kernels.launch import launch, wait
from dgvm.kernels.vectorize import vectorize
from dgvm.client.lookup import stats, table, translate, translate_many, workers
from dgvm.client.rebalance import rebalance
from dgvm.protocol.records import AllocationInfo, ChunkInfo, DeviceProfile, Location, WorkerInfo
from dgvm.client.session import connect

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "AllocationInfo",
    "ChunkInfo",
    "ChunkLost",
    "ConfigError",
    "DeviceProfile",
    "DgvmError",
    "GlobalBuffer",
    "InvalidAddress",
    "InvalidArgument",
    "InvalidArgumentType",
    "KernelError",
    "LocalCluster",
    "Location",
    "NotConnected",
    "NotSupported",
    "OutOfDeviceMemory",
    "WorkerInfo",
    "blocks",
    "connect",
    "kernel",
    "launch",
    "malloc",
    "rebalance",
    "table",
    "translate",
    "stats",
    "translate_many",
    "vectorize",
    "wait",
    "workers",
]
