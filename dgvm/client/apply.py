"""Owner computes: run a function on an allocation's chunks, on the workers that hold them.

One Dask task per worker covers all of that worker's chunks (it shows up in the dashboard
like any task); the function sees each chunk as a 1-D uint8 device array, without copies
(the task body is ``dgvm.worker.tasks.apply_here``).
"""

from __future__ import annotations

from dgvm.client.dispatch import gather, submit
from dgvm.worker.tasks import apply_here


def map_chunks(alloc, fn, *args, indices=None, name: str | None = None) -> list:
    """Call ``fn(xp, chunk_u8, index, *args)`` for each chunk (all, or ``indices``) on its
    home worker; return the results in chunk order. ``xp`` is the worker's array module
    (numpy or cupy); ``fn`` may write to the chunk in place."""
    alloc.check_live()
    alloc.writes += 1  # ``fn`` may write the chunks
    wanted = range(alloc.nchunks) if indices is None else indices
    by_worker = alloc.by_home(wanted)
    tag = name or getattr(fn, "__name__", "fn")
    alloc.pending.last.clear()  # (fn may write any of them: no task is their known last writer)
    futures = submit(alloc.client, apply_here, (alloc.alloc_id, alloc.owner, fn, args), by_worker, [],
                     f"{tag}-{alloc.alloc_id}")
    out = {}
    for idx, part in zip(by_worker.values(), gather(alloc.client, futures)):
        out.update(zip(idx, part))
    return [out[i] for i in wanted]
