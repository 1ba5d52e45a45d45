"""Asking a chunk's holder for it: one export request per holder covers many chunks."""

from __future__ import annotations

from distributed.protocol import deserialize

from dgvm.protocol import messages
from dgvm.protocol.records import AllocId, WorkerAddress


def unwrap(desc):
    """A descriptor with its comm bytes deserialized (they may arrive still serialized)."""
    if desc is messages.MOVED:
        return desc
    data = desc.get("data")
    if data is not None and hasattr(data, "header"):  # still serialized (comm path)
        desc["data"] = deserialize(data.header, data.frames)
    return desc


async def request_exports(worker, holder: WorkerAddress, alloc_id: AllocId, indices, path: str,
                          move: bool = False, have: list | None = None, span=None) -> list:
    """Descriptors of chunks ``indices`` of ``alloc_id`` from ``holder`` for ``path``, in
    order. A chunk the holder no longer has (it moved meanwhile) comes back as
    ``messages.MOVED``: ask the GVAT again. ``move``: the chunks move here; the holder
    holds their writes back until the move ends, and answers ``{"current": True}`` for
    a chunk whose write count is the one ``have`` gives ([index, writes] pairs: this
    worker's replica is a copy of it as it is). ``span``: ``[start, stop)``, the bytes of
    each chunk that are read (a piece: no copy of the chunk is kept)."""
    descs = await messages.call(  # (a holder that is closing: PeerClosing)
        worker.rpc(holder), messages.EXPORT, required=True,
        alloc_id=alloc_id, indices=[int(i) for i in indices], path=path, to=worker.address,
        move=move, have=have or [], **({"span": [int(v) for v in span]} if span is not None else {}),
    )
    return [unwrap(d) for d in descs]
