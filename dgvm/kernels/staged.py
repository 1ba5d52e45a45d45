"""All-or-nothing launches, for kernels that may stop halfway.

A kernel that can raise after writing part of a chunk (on ``cpu``: ``raise``, ``assert``,
calls into Python or NumPy, bounds checks; anything in the simulator) must leave the
output as it was when it fails, on every worker, not only on the chunk that failed. So
``dgvm.launch`` runs it in two steps (``launch.dispatch(..., then=...)``):

1. ``stage``, one task per home of the output: the kernel writes copies of the worker's
   output chunks, kept here under the launch's id; an error is returned, not raised, so
   that every worker's second step runs;
2. ``commit``, one task per home, after every ``stage``: with no error anywhere, the
   copies become the output (and the GVAT hears of the writes); else every worker drops
   its copies and raises the first error, a ``KernelError`` naming the kernel, the chunk
   and the worker.

It costs a copy of the output and one more step, so kernels that cannot stop halfway
(every CUDA kernel: it runs to its end or ends the context) write in place in one step.
What it covers is the kernel's own failure: the commit only copies (or forwards a chunk
whose home moved meanwhile), and a failure there (a worker lost) can still leave part
of the output written. The copies are kept by the worker's chunk store, which drops them
when the output is freed before its commit.
"""

from __future__ import annotations

from dgvm.errors import DgvmError
from dgvm.kernels.access import Access, ArraySpec
from dgvm.kernels.launch import kernel_call, write_chunks


def stage(stage_id: str, kernel, out: ArraySpec, specs, halo, pass_origin, tpb, indices, deps) -> dict:
    """Step 1 on one worker: {"staged": n} or {"error": exception}."""
    access = Access.here()
    backend = access.store.backend
    made = {}

    def per_chunk(k):
        args, target, griddim, blockdim = kernel_call(access, out, specs, k, halo, pass_origin, tpb)
        copy = backend.xp.array(target, copy=True)  # elements it leaves keep their value
        kernel.run(backend.name, griddim, blockdim, [*args, copy])
        made[k] = copy

    try:
        write_chunks(access, out, indices, f"kernel {kernel.name!r}", per_chunk,
                     kernel_errors=True, writes=False)
    except DgvmError as e:  # every worker's commit raises it; nothing was written
        return {"error": e}
    access.store.stage(stage_id, out.alloc_id, made)
    return {"staged": len(made)}


def commit(stage_id: str, out: ArraySpec, what: str, indices, results: list) -> int:
    """Step 2 on one worker: the staged copies become the output, or all are dropped."""
    access = Access.here()
    made = access.store.take_staged(stage_id)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise errors[0]

    missing = [k for k in indices if k not in made]
    if missing:
        raise DgvmError(f"launch {stage_id}: no staged chunks {missing} of allocation "
                        f"{out.alloc_id} on {access.worker.address} (freed meanwhile?)")

    def per_chunk(k):
        if access.store.is_home(out.alloc_id, k):
            access.chunk(out, k)[...] = made.pop(k)
        else:  # its home moved after the launch was placed: ``report`` forwards it
            access.forwarded.append((k, made.pop(k)))

    return write_chunks(access, out, indices, what, per_chunk, kernel_errors=False)

