"""The tasks of ``dgvm.launch`` on a worker: a kernel run per output chunk, in place or
all or nothing.

``launch_here`` runs a kernel that cannot stop halfway (every CUDA kernel: it runs to its
end or ends the context) in place, in one step.

All-or-nothing launches, for kernels that may stop halfway.

A kernel that can raise after writing part of a chunk (on ``cpu``: ``raise``, ``assert``,
calls into Python or NumPy; anything in the simulator) must leave the output as it was
when it fails, on every worker, not only on the chunk that failed. (An index out of
bounds, checked on ``cpu``, is a bug of the kernel: it raises without this, and may leave
the launch's output chunks partly written; ``dgvm.kernels.cpu``.) So
``dgvm.launch`` runs it in two steps (``dgvm.client.dispatch(..., then=...)``):

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

import math
from dataclasses import dataclass

from dgvm.protocol import messages
from dgvm.protocol.errors import DgvmError
from dgvm.protocol.records import ArraySpec
from dgvm.worker.access import Access
from dgvm.worker.tasks import current_key, write_chunks

# Default threads per block by launch dimensionality.
DEFAULT_BLOCK = {1: (256,), 2: (16, 16), 3: (8, 8, 4)}


def launch_config(shape, threads_per_block=None):
    """(griddim, blockdim) with one thread per element of an array of ``shape``."""
    shape = tuple(shape) or (1,)
    if len(shape) > 3:
        raise ValueError(f"kernels launch over at most 3 dimensions, the chunk has {len(shape)}")
    block = threads_per_block or DEFAULT_BLOCK[len(shape)]
    block = (block,) if isinstance(block, int) else tuple(block)
    if len(block) != len(shape):
        raise ValueError(f"threads_per_block {block} does not match a {len(shape)}-d chunk")
    return tuple(math.ceil(s / b) for s, b in zip(shape, block)), block


def kernel_call(access: Access, out: ArraySpec, specs, k: int, halo: int, pass_origin: bool, tpb):
    """(arguments before the output, output chunk, grid, block) of a launch's chunk ``k``."""
    xp = access.store.backend.xp
    block = out.block(k)
    args = []
    for kind, v in specs:
        if kind == "scalar":
            args.append(v)
        elif kind == "blocks":
            spec, select = v
            sel = select(block)
            args.append(access.blocks(spec, sel if isinstance(sel, tuple) else (sel,), xp))
        elif halo:
            args.append(access.with_halo(v, block, halo, xp))
        else:
            args.append(access.chunk(v, k))
    target = access.chunk(out, k)
    if pass_origin:
        args.insert(0, tuple(out.edges(a)[b] for a, b in enumerate(block)))  # the chunk's origin
    return args, target, *launch_config(target.shape, tpb)


def launch_here(kernel, out: ArraySpec, specs, halo, pass_origin, tpb, indices, deps):
    access = Access.here()
    store = access.store
    backend = store.backend
    aliased = any((v.alloc_id if kind == "array" else v[0].alloc_id) == out.alloc_id
                  for kind, v in specs if kind != "scalar")

    def per_chunk(k):
        args, target, griddim, blockdim = kernel_call(access, out, specs, k, halo, pass_origin, tpb)
        if aliased or not store.is_home(out.alloc_id, k):
            # Run on a copy: the kernel reads the output's old values through an
            # argument, or the home moved after the task was placed (put_result
            # forwards the copy there).
            scratch = access.scratch(target.shape, target.dtype)
            scratch[...] = target
            kernel.run(backend.name, griddim, blockdim, [*args, scratch])
            access.put_result(out, k, target, scratch)
        else:  # in place: read and written once (``launch`` stages kernels that may stop halfway)
            kernel.run(backend.name, griddim, blockdim, [*args, target])

    return write_chunks(access, out, indices, f"kernel {kernel.name!r}", per_chunk, kernel_errors=True)



@dataclass(frozen=True)
class Staged:
    """What step 1 on one worker hands every worker's step 2: the chunks it staged, or
    the error that stops the launch (returned, not raised, so that every commit runs)."""

    chunks: int = 0
    error: DgvmError | None = None


def stage(stage_id: str, kernel, out: ArraySpec, specs, halo, pass_origin, tpb, indices, deps) -> Staged:
    """Step 1 on one worker."""
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
        return Staged(error=e)
    access.store.stage(stage_id, out.alloc_id, made)
    return Staged(len(made))


def commit(stage_id: str, out: ArraySpec, what: str, indices, results: list[Staged]) -> int:
    """Step 2 on one worker: the staged copies become the output, or all are dropped."""
    access = Access.here()
    again = access.store.done_writing
    if again and again.get(current_key(access)) == messages.ALL_WRITTEN:
        return write_chunks(access, out, indices, what, None, kernel_errors=False)  # done before
    made = access.store.take_staged(stage_id, indices)
    errors = [r.error for r in results if r.error is not None]
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

