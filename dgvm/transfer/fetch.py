"""Asking a chunk's holder for it: one export request per holder covers many chunks."""

from __future__ import annotations


def _unwrap(desc: dict) -> dict:
    data = desc.get("data")
    if data is not None and hasattr(data, "header"):  # still serialized (comm path)
        from distributed.protocol import deserialize

        desc["data"] = deserialize(data.header, data.frames)
    return desc


async def request_exports(worker, holder: str, alloc_id: int, indices, path: str) -> list[dict]:
    """Descriptors of chunks ``indices`` of ``alloc_id`` from ``holder`` for ``path``, in
    order. A chunk the holder no longer has (it moved meanwhile) comes back as
    ``{"moved": True}``: ask the GVAT again."""
    descs = await worker.rpc(holder).dgvm_export(
        alloc_id=alloc_id, indices=[int(i) for i in indices], path=path, to=worker.address
    )
    return [_unwrap(d) for d in descs]
