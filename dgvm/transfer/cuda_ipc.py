"""``cuda`` same host: open the holder's buffer through a CUDA IPC handle and copy it
device to device (peer copy over NVLink/PCIe), with no host staging. The receiver keeps
the mapping for the next copy from that buffer (its ``ImportedMappings``: one per worker,
``Transfers.mappings``); the holder asks it to forget the buffer before freeing it."""

from __future__ import annotations

from dgvm.protocol.messages import moved
from dgvm.transfer.base import TransferPath
from dgvm.transfer.ipc_exports import handle_of
from dgvm.transfer.ipc_mappings import ImportedMappings


def _open(token: bytes):
    import cupy  # optional (dgvm[cuda]): only a cuda worker opens IPC handles

    rt = cupy.cuda.runtime
    return rt.ipcOpenMemHandle(handle_of(token), rt.cudaIpcMemLazyEnablePeerAccess)


def _close(ptr) -> None:
    import cupy  # optional (dgvm[cuda])

    cupy.cuda.runtime.ipcCloseMemHandle(ptr)


def peer_mappings() -> ImportedMappings:
    """A worker's mappings of its peers' buffers, empty (made by its ``Transfers``)."""
    return ImportedMappings(_open, _close)


class CudaIpcPath(TransferPath):
    name = "cuda_ipc"

    def __init__(self, mappings: ImportedMappings):
        self.mappings = mappings  # this worker's, kept between copies

    @staticmethod
    def usable(src, dst):
        return src.backend == dst.backend == "cuda" and src.host == dst.host

    def export(self, store, alloc_id, index, to=None):
        c = store.chunk(alloc_id, index, None)
        # Checked again under the exports' lock: a release between here and there either
        # finds the buffer exported to ``to`` (and asks it to forget) or makes this moved.
        handle = store.backend.ipc_handle(
            c.handle, to, lambda: store.is_home(alloc_id, index) and store.local(alloc_id, index) is c
        )
        if handle is None:
            return moved()
        return {"ipc": handle, "holder": store.address, "nbytes": c.nbytes}

    def fetch_into(self, desc, dst):
        # The copy's time is the device's (CUDA events), as the link did it: a wall clock
        # here also counts this thread waiting for the GIL after the copy ended.
        import cupy  # optional (dgvm[cuda])

        rt = cupy.cuda.runtime
        maps = self.mappings
        src = maps.acquire(desc["holder"], desc["ipc"])
        try:
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            stream = cupy.cuda.get_current_stream()
            start.record(stream)
            # Unified addressing: a plain device-to-device copy reaches the peer's memory.
            rt.memcpyAsync(dst.data.ptr, src, desc["nbytes"], rt.memcpyDeviceToDevice, stream.ptr)
            stop.record(stream)
            stop.synchronize()  # the copy is done before the mapping may be closed
            return cupy.cuda.get_elapsed_time(start, stop) / 1e3
        finally:
            maps.release(desc["holder"], desc["ipc"])
