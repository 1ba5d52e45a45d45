"""``dgvm.launch``: run a kernel once per chunk of ``out``, on the worker that holds it.

One Dask task per worker covers all of that worker's chunks of ``out``
(``dgvm.client.dispatch``; the bodies are ``dgvm.worker.kernel_tasks``). Launches are
asynchronous and ordered: a launch's tasks depend on the tasks of earlier launches that
wrote its inputs or its output, or read its output (those that touched the same chunks,
``dgvm.client.ordering``), so every launch sees the writes of the ones before it.
``dgvm.wait(x)`` blocks until ``x`` is current.
"""

from __future__ import annotations

import uuid

from dgvm.array import DArray
from dgvm.array._engine import lineage
from dgvm.array._engine.view_writes import write_view
from dgvm.client.dispatch import dispatch
from dgvm.kernels.blocks import Blocks
from dgvm.kernels.kernel import Kernel
from dgvm.worker import kernel_tasks
from dgvm.protocol import arguments
from dgvm.protocol.errors import InvalidArgument
from dgvm.protocol.records import ArraySpec


def _spec(a):
    """How a launch argument travels to the task: an array, chosen blocks, or a scalar."""
    if isinstance(a, DArray):
        return ("array", ArraySpec.of(a))
    if isinstance(a, Blocks):
        return ("blocks", (ArraySpec.of(a.array), a.select))
    return ("scalar", a)


def _inputs(args) -> list:
    return [a.array if isinstance(a, Blocks) else a for a in args if isinstance(a, (DArray, Blocks))]


def check_args(args, out) -> None:
    """Every DArray argument has ``out``'s shape and chunks."""
    for k, a in enumerate(args):
        if isinstance(a, DArray) and (a.shape != out.shape or a.chunks != out.chunks):
            raise ValueError(
                f"argument {k} has shape {a.shape} and chunks {a.chunks}; the output has "
                f"shape {out.shape} and chunks {out.chunks}: DArray arguments of a launch "
                "must match the output (rechunk, or use halo= or dgvm.blocks)"
            )


def _check_threads(threads_per_block, ndim: int) -> None:
    """None, a positive int (1-d) or one positive int per dimension of the output."""
    if threads_per_block is None:
        return
    block = (threads_per_block,) if arguments.is_integer(threads_per_block) else threads_per_block
    block = arguments.sequence("threads_per_block", block)
    for k, b in enumerate(block):
        arguments.integer(f"threads_per_block[{k}]", b, 1)
    if len(block) != max(ndim, 1):
        raise InvalidArgument(
            f"threads_per_block {tuple(block)} has {len(block)} dimensions; the output has {ndim}")


def launch(kernel, *args, out, halo: int = 0, pass_origin: bool = False,
           threads_per_block=None) -> None:
    """Run ``kernel`` once per chunk of ``out`` where that chunk lives.

    Each DArray argument arrives as its chunk with the output chunk's index (extended by
    up to ``halo`` cells from its neighbours); a ``dgvm.blocks(x, select)`` argument
    arrives as the blocks ``select(out_block)`` of ``x``; scalars pass through; ``out`` is
    the last argument. With ``pass_origin=True`` the kernel's first argument is the output chunk's
    global start index (a tuple). The launch configuration gives one thread per element
    of the output chunk; ``threads_per_block`` overrides the block shape.
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"launch needs a @dgvm.kernel, got {kernel!r}")
    if not isinstance(out, DArray):
        raise TypeError(f"out must be a dgvm DArray, got {type(out).__name__}")
    halo = arguments.integer("halo", halo, 0)
    arguments.flag("pass_origin", pass_origin)
    _check_threads(threads_per_block, out.ndim)
    check_args(args, out)
    if out.size == 0:  # no chunk to run on (dgvm.array._engine.zero_size)
        return
    if out.alias is not None:
        # A view: the kernel runs on a copy of its values, written through to its base
        # after (ordered after the kernel; a failed kernel leaves the base as it was).
        copy = out.alias.copy_of(out)
        launch(kernel, *args, out=copy, halo=halo, pass_origin=pass_origin, threads_per_block=threads_per_block)
        write_view(out, copy)
        return
    # Arrays that lost chunks are made again from their lineage first, where they can be.
    lineage.recover([out, *_inputs(args)])
    specs = [_spec(a) for a in args]
    # Each array argument is read at the output chunk's own index (checked above).
    aligned = halo == 0 and not any(isinstance(a, Blocks) for a in args)
    task_args = (kernel, ArraySpec.of(out), specs, halo, pass_origin, threads_per_block)
    name = f"launch-{kernel.name}"
    if any(kernel.may_fail_halfway(b) for b in out.alloc.backends()):
        # All or nothing: the output stays as it was on every worker if one fails.
        stage_id = uuid.uuid4().hex
        dispatch(kernel_tasks.stage, out, _inputs(args), name, stage_id, *task_args, aligned=aligned,
                 then=(kernel_tasks.commit, stage_id, ArraySpec.of(out), f"kernel {kernel.name!r}"))
    else:
        dispatch(kernel_tasks.launch_here, out, _inputs(args), name, *task_args, aligned=aligned)


def wait(*arrays) -> None:
    """Block until every launch that writes these arrays has finished; raise the first
    ``KernelError``."""
    for x in arrays:
        if not isinstance(x, DArray):
            raise TypeError(f"dgvm.wait takes DArrays, got {arguments.shown(x)}")
    for x in arrays:
        x.wait()
