"""Owner computes: run a function on an allocation's chunks, on the workers that hold them.

One Dask task per worker covers all of that worker's chunks (it shows up in the dashboard
like any task); the function sees each chunk as a 1-D uint8 device array, without copies.
Kernels (``dgvm.launch``) build on this.
"""

from __future__ import annotations

import uuid
from distributed import get_worker

from dgvm.errors import DgvmError, detached_task_errors


def _apply_here(alloc_id: int, owner: str, indices: list[int], fn, args):
    store = get_worker().extensions.get("dgvm")
    if store is None:
        raise DgvmError(f"worker {get_worker().address} has no dgvm chunk store")
    xp = store.backend.xp
    out = []
    with store.lock:  # no free or copy of these chunks while fn runs
        for i in indices:
            store.chunk(alloc_id, i, owner)  # validates owner and presence
            out.append(fn(xp, store.view(alloc_id, i), i, *args))
        store.backend.synchronize()
    return out


def map_chunks(alloc, fn, *args, indices=None, name: str | None = None) -> list:
    """Call ``fn(xp, chunk_u8, index, *args)`` for each chunk (all, or ``indices``) on its
    home worker; return the results in chunk order. ``xp`` is the worker's array module
    (numpy or cupy); ``fn`` may write to the chunk in place."""
    alloc._check_live()
    client = alloc.client
    wanted = range(alloc.nchunks) if indices is None else indices
    by_worker = alloc.by_home(wanted)
    tag = name or getattr(fn, "__name__", "fn")
    futures = {
        w: client.submit(
            _apply_here, alloc.alloc_id, alloc.owner, idx, fn, args,
            workers=[w], allow_other_workers=False, pure=False,
            key=f"dgvm-{tag}-{alloc.alloc_id}-{uuid.uuid4().hex[:8]}",
        )
        for w, idx in by_worker.items()
    }
    with detached_task_errors():  # a failure's frames do not keep alloc alive
        results = dict(zip(futures, client.gather(list(futures.values()))))
    out = {}
    for w, idx in by_worker.items():
        out.update(zip(idx, results[w]))
    return [out[i] for i in wanted]
