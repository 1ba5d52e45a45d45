"""Asking a chunk's holder for it: one export request per holder covers many chunks."""

from __future__ import annotations

from distributed.protocol import deserialize

from dgvm.protocol import messages
from dgvm.protocol.records import AllocId, WorkerAddress


def _unwrap(desc):
    if desc is messages.MOVED:
        return desc
    data = desc.get("data")
    if data is not None and hasattr(data, "header"):  # still serialized (comm path)
        desc["data"] = deserialize(data.header, data.frames)
    return desc


async def request_exports(worker, holder: WorkerAddress, alloc_id: AllocId, indices, path: str) -> list:
    """Descriptors of chunks ``indices`` of ``alloc_id`` from ``holder`` for ``path``, in
    order. A chunk the holder no longer has (it moved meanwhile) comes back as
    ``messages.MOVED``: ask the GVAT again."""
    descs = await messages.call(
        worker.rpc(holder), messages.EXPORT,
        alloc_id=alloc_id, indices=[int(i) for i in indices], path=path, to=worker.address,
    )
    return [_unwrap(d) for d in descs]
