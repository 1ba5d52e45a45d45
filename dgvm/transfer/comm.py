"""Any two workers: the chunk's bytes travel over Dask's comm (UCX if installed, else TCP).

The holder's export carries the bytes themselves; the receiver copies them into its device.
"""

from __future__ import annotations

import time

import numpy as np
from distributed.protocol import to_serialize

from dgvm.transfer.base import TransferPath


class CommPath(TransferPath):
    name = "comm"
    export_reads = True

    @staticmethod
    def usable(src, dst):
        return True

    def export(self, store, alloc_id, index, to=None, span=None):
        c = store.chunk(alloc_id, index, None)
        start, stop = span if span is not None else (0, c.nbytes)
        # After the chunk's last write only: not behind the holder's other queued work.
        data = store.backend.read_after(c.handle, c.nbytes, start, stop - start, store.last_write(alloc_id, index))
        return {"data": to_serialize(data), "nbytes": c.nbytes, "start": start}

    def fetch_into(self, desc, dst, start=0):
        src = np.asarray(desc["data"]).view(np.uint8).reshape(-1)
        at = start - desc.get("start", 0)  # (the export carries the bytes asked for only)
        src = src[at:at + dst.shape[0]]
        t0 = time.perf_counter()
        if isinstance(dst, np.ndarray):
            dst[:] = src
        else:  # a CuPy array: one host-to-device copy
            dst.set(src)
        return time.perf_counter() - t0
