"""``cuda`` same host: open the holder's buffer through a CUDA IPC handle and copy it
device to device (peer copy over NVLink/PCIe), with no host staging. The receiver keeps
the mapping for the next copy from that buffer (its ``ImportedMappings``: one per worker,
``Transfers.mappings``); the holder asks it to forget the buffer before freeing it. The
chunks of one move are copied back to back on the stream and waited for once
(``fetch_many``): no host round trip between two copies."""

from __future__ import annotations

from dgvm.protocol.messages import moved
from dgvm.transfer.base import TransferPath, release_fetched, shares
from dgvm.transfer.ipc_exports import handle_of
from dgvm.transfer.ipc_mappings import BufferGone, ImportedMappings

#: chunks whose copies are queued together and waited for once: each holds its peer
#: buffer's mapping until then, well under the mappings kept (``ImportedMappings.limit``)
BATCH = 32


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
    batch_bytes = 4 << 30  # about 11 ms over NVLink

    def __init__(self, mappings: ImportedMappings):
        self.mappings = mappings  # this worker's, kept between copies

    @staticmethod
    def usable(src, dst):
        return src.backend == dst.backend == "cuda" and src.host == dst.host

    def export(self, store, alloc_id, index, to=None, span=None):
        c = store.chunk(alloc_id, index, None)
        # Checked again under the exports' lock: a release between here and there either
        # finds the buffer exported to ``to`` (and asks it to forget) or makes this moved.
        handle = store.backend.ipc_handle(
            c.handle, to, lambda: store.is_home(alloc_id, index) and store.local(alloc_id, index) is c
        )
        if handle is None:
            return moved()
        return {"ipc": handle, "holder": store.address, "nbytes": c.nbytes}

    def fetch_into(self, desc, dst, start=0):
        # The copy's time is the device's (CUDA events), as the link did it: a wall clock
        # here also counts this thread waiting for the GIL after the copy ended.
        import cupy  # optional (dgvm[cuda])

        rt = cupy.cuda.runtime
        maps = self.mappings
        src = maps.acquire(desc["holder"], desc["ipc"])
        try:
            began, ended = cupy.cuda.Event(), cupy.cuda.Event()
            stream = cupy.cuda.get_current_stream()
            began.record(stream)
            # Unified addressing: a plain device-to-device copy reaches the peer's memory.
            rt.memcpyAsync(dst.data.ptr, src + start, dst.nbytes, rt.memcpyDeviceToDevice, stream.ptr)
            ended.record(stream)
            ended.synchronize()  # the copy is done before the mapping may be closed
            return cupy.cuda.get_elapsed_time(began, ended) / 1e3
        finally:
            maps.release(desc["holder"], desc["ipc"])

    def fetch_many(self, descs, backend):
        out: list = []
        try:
            for at in range(0, len(descs), BATCH):
                out.extend(self._fetch_batch(descs[at:at + BATCH], backend))
        except BaseException:
            release_fetched(backend, descs, out)
            raise
        return out

    def _fetch_batch(self, descs, backend) -> list:
        # Each chunk's buffer and mapping, then its copy queued at once on the stream every
        # task and copy of this worker uses: opening the next peer buffer (a millisecond
        # for one not mapped yet) overlaps the copies queued before it. One wait for them
        # all, then the mappings go back.
        import cupy  # optional (dgvm[cuda])

        rt = cupy.cuda.runtime
        maps = self.mappings
        out: list = [None] * len(descs)
        made: list = []  # (k, handle): a mapping acquired and a copy queued for each
        stream = cupy.cuda.get_current_stream()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        free = backend.free  # (asks the driver: once, not per chunk)
        try:
            for k, desc in enumerate(descs):
                n = desc["nbytes"]
                try:
                    src = maps.acquire(desc["holder"], desc["ipc"])
                except BufferGone:  # freed or moved after the export: the others go on
                    continue
                try:
                    handle = backend.allocate(n, zero=False, free=free)
                except BaseException:
                    maps.release(desc["holder"], desc["ipc"])
                    raise
                first = not made
                made.append((k, handle))
                free -= backend.footprint(n)
                dst = backend.view(handle, n).data.ptr
                if first:  # the link's time: from the first copy on (a gap after it counts)
                    start.record(stream)
                # Unified addressing: a plain device-to-device copy reaches the peer's memory.
                rt.memcpyAsync(dst, src, n, rt.memcpyDeviceToDevice, stream.ptr)
            if not made:
                return out
            stop.record(stream)
            stop.synchronize()  # the copies are done before the mappings may be closed
            seconds = shares([descs[k] for k, _ in made], cupy.cuda.get_elapsed_time(start, stop) / 1e3)
            backend.synchronize()  # (as ``fetch`` does after one copy)
            for (k, handle), s in zip(made, seconds):
                out[k] = (handle, s)
        except BaseException:
            if made:  # queued copies read the peers' buffers: done before their mappings close
                try:
                    stream.synchronize()
                except Exception:  # noqa: BLE001  (a device fault: the context is gone anyway)
                    pass
            for k, handle in made:
                backend.release(handle, descs[k]["nbytes"])
            raise
        finally:
            for k, _ in made:
                maps.release(descs[k]["holder"], descs[k]["ipc"])
        return out
