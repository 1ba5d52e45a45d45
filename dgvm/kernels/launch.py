"""``dgvm.launch``: run a kernel once per chunk of ``out``, on the worker that holds it.

One Dask task per worker covers all of that worker's chunks of ``out``. Launches are
asynchronous and ordered: a launch's tasks depend on the tasks of earlier launches that
wrote its inputs or its output, or read its output (those that touched the same chunks,
``dgvm.kernels.ordering``), so every launch sees the writes of the ones before it.
``dgvm.wait(x)`` blocks until ``x`` is current.
"""

from __future__ import annotations

import contextlib
import traceback
import uuid

from distributed import wait as dask_wait
from distributed.protocol import to_serialize
from distributed.utils import sync

from dgvm import config, streams
from dgvm.errors import DgvmError, KernelError, detached_task_errors
from dgvm.kernels import ordering
from dgvm.kernels.access import Access, ArraySpec
from dgvm.kernels.blocks import Blocks
from dgvm.kernels.kernel import Kernel, launch_config


def _is_array(a) -> bool:
    from dgvm.array.darray import DArray

    return isinstance(a, DArray)


def _spec(a):
    """How a launch argument travels to the task: an array, chosen blocks, or a scalar."""
    if _is_array(a):
        return ("array", ArraySpec.of(a))
    if isinstance(a, Blocks):
        return ("blocks", (ArraySpec.of(a.array), a.select))
    return ("scalar", a)


def _inputs(args) -> list:
    return [a.array if isinstance(a, Blocks) else a for a in args if _is_array(a) or isinstance(a, Blocks)]


def _check_args(args, out):
    for k, a in enumerate(args):
        if _is_array(a) and (a.shape != out.shape or a.chunks != out.chunks):
            raise ValueError(
                f"argument {k} has shape {a.shape} and chunks {a.chunks}; the output has "
                f"shape {out.shape} and chunks {out.chunks}: DArray arguments of a launch "
                "must match the output (rechunk, or use halo= or dgvm.blocks)"
            )


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
    if not _is_array(out):
        raise TypeError(f"out must be a dgvm DArray, got {type(out).__name__}")
    if halo < 0:
        raise ValueError(f"halo must be >= 0, got {halo}")
    _check_args(args, out)
    if out.size == 0:  # no chunk to run on (dgvm.array.zero_size)
        return
    specs = [_spec(a) for a in args]
    # Each array argument is read at the output chunk's own index (checked above).
    aligned = halo == 0 and not any(isinstance(a, Blocks) for a in args)
    task_args = (kernel, ArraySpec.of(out), specs, halo, pass_origin, threads_per_block)
    name = f"launch-{kernel.name}"
    if any(kernel.may_fail_halfway(b) for b in out.alloc.backends()):
        # All or nothing: the output stays as it was on every worker if one fails.
        from dgvm.kernels import staged

        stage_id = uuid.uuid4().hex
        dispatch(staged.stage, out, _inputs(args), name, stage_id, *task_args, aligned=aligned,
                 then=(staged.commit, stage_id, ArraySpec.of(out), f"kernel {kernel.name!r}"))
    else:
        dispatch(_launch_here, out, _inputs(args), name, *task_args, aligned=aligned)


def dispatch(fn, out, inputs, name: str, *task_args, then=None, aligned: bool = False) -> None:
    """Submit ``fn(*task_args, indices, deps)`` as one task per home worker of ``out``'s
    chunks, ordered after earlier launches: after those that wrote ``inputs`` or ``out``,
    and after those that read ``out``, where they touched the task's chunks
    (``dgvm.kernels.ordering``; ``aligned``: each task reads only its own chunks' block
    indices of its inputs, which counts when they all have ``out``'s grid). Record the
    new tasks as writers of ``out`` and readers of ``inputs``. ``then=(fn2, *args2)``: a second task per worker,
    ``fn2(*args2, indices, results)`` with the results of every first task (a step all
    workers must finish first), recorded instead."""
    out._before_write()  # deferred readers of out run first
    aligned = aligned and all(a.chunks == out.chunks for a in inputs)
    out_tasks = unfinished(out._pending.writes + still_reading(out._pending.reads))
    input_writers = unfinished([f for a in inputs for f in a._pending.writes])
    client = out.alloc.client
    homes = out.alloc.by_home()
    if then is None:
        deps = {w: ordering.after(idx, aligned, out_tasks, input_writers) for w, idx in homes.items()}
    else:
        # All or nothing: an earlier failure must stop every first task, or those of the
        # other workers would stage copies that no second task ever takes. (Every earlier
        # task touched some chunk of out, so each follows all of them.)
        deps = dict.fromkeys(homes, out_tasks + input_writers)
    futures = [
        client.submit(
            fn, *task_args, idx, deps[w], workers=[w], allow_other_workers=False, pure=False,
            key=f"dgvm-{name}-{uuid.uuid4().hex[:10]}",
        )
        for w, idx in homes.items()
    ]
    ordering.record(futures, homes.values(), aligned)
    readers = futures  # the first tasks read the inputs; the second ones only write out
    if then is not None:
        fn2, *args2 = then
        futures = [
            client.submit(
                fn2, *args2, idx, futures, workers=[w], allow_other_workers=False, pure=False,
                key=f"dgvm-{name}-commit-{uuid.uuid4().hex[:10]}",
            )
            for w, idx in homes.items()
        ]
        ordering.record(futures, homes.values(), aligned)
    out._pending.writes, out._pending.reads = futures, []
    add_readers([a for a in inputs if a is not out], readers)


def add_readers(arrays, futures) -> None:
    """Record ``futures`` as tasks that read ``arrays``: a later write to one of them
    waits for those still reading."""
    for a in arrays:
        a._pending.reads = still_reading(a._pending.reads) + futures


def unfinished(futures) -> list:
    """The futures whose tasks have not finished. A task ordered after a finished one
    needs no dependency on it (a dependency on a task of another worker would even fetch
    its result there first), and reader lists stay short in long loops. Failed tasks stay:
    their error belongs to whoever waits next."""
    return [f for f in futures if f.status != "finished"]


def still_reading(futures) -> list:
    """The readers a later writer must wait for: those not finished. A reader that failed
    reads no more, and its error belongs to its own output, not to the array it read."""
    return [f for f in futures if f.status not in ("finished", "error", "cancelled")]


def report(out: ArraySpec, indices, access: Access) -> None:
    """Tell the GVAT what a task wrote and read: it counts hits and misses, bumps the
    written chunks' versions, drops their replicas and may move chunks read here often
    enough. The report travels on the worker's batched stream, handed over before the
    task returns: the scheduler handles it (awaiting the drops and moves) before the
    task's completion, which comes after it on the same stream, so no later task sees a
    stale replica, and the task itself does not wait. Output chunks whose home moved
    away after the task was placed (``access.forwarded``) go to their new home first."""
    worker = access.worker
    for k, result in access.forwarded:
        where = access.locate(out.alloc_id, k)
        data = to_serialize(access.store.backend.to_host(result))
        # The home's write handler bumps the version and drops replicas itself.
        sync(worker.loop, worker.rpc(where["home"]).dgvm_write, alloc_id=out.alloc_id,
             owner=out.owner, pieces=[[k, 0, data]])
    done = {k for k, _ in access.forwarded}
    reads = {
        str(a): {**r, "home": sorted(r["home"]), "remote": sorted(r["remote"])}
        for a, r in access.reads.items()
    }
    message = {"op": streams.REPORT, "alloc_id": out.alloc_id,
               "wrote": [k for k in indices if k not in done], "reads": reads}
    worker.loop.add_callback(worker.batched_stream.send, message)


def wait(*arrays) -> None:
    """Block until every launch that writes these arrays has finished; raise the first
    ``KernelError``."""
    for x in arrays:
        x.wait()


def write_chunks(access: Access, out: ArraySpec, indices, what: str, per_chunk, kernel_errors: bool,
                 writes: bool = True) -> int:
    """The body of a task that writes chunks ``indices`` of ``out`` here: ``per_chunk(k)``
    for each (the store locked), at most one wait for the device for the whole task (it
    runs one chunk while the next is queued; one stream, so a buffer freed meanwhile is
    reused only after the work queued on it; ``device_task``), then the report to
    the GVAT. The chunks written are reported also when a later one fails: their
    replicas elsewhere must go.

    ``kernel_errors``: a failure in ``per_chunk`` comes back as a ``KernelError`` naming
    ``what``, the chunk and the worker (else as raised). A device fault found by the wait
    is a ``KernelError`` for the task's chunks either way. ``writes=False``: ``per_chunk``
    leaves ``out`` as it is (a staged launch); only the reads are reported."""
    written = []
    try:
        with device_task(access, what, out, indices):
            for k in indices:
                try:
                    with access.output_chunk():
                        per_chunk(k)
                except Exception as e:
                    if not kernel_errors or isinstance(e, DgvmError):
                        raise
                    raise kernel_error(what, out, [k], access, e) from None
                written.append(k)
    finally:
        wrote = written if writes else []
        if wrote or access.reads:
            report(out, wrote, access)
    return len(indices)


def finish_on_device(access: Access, what: str, out: ArraySpec, indices, may_leave: bool = True) -> None:
    """End a task's device work: leave it running when ``may_leave`` and another dgvm
    task is ready on this worker (that one, or the last of the run, waits:
    ``dgvm.backends.queued_work``), else wait for the device. A fault found by the wait is
    a ``KernelError`` for the task's chunks, which names the work earlier tasks left
    running: the fault may be theirs."""
    backend = access.store.backend
    queued = backend.queued
    if (may_leave and backend.one_stream and config.get("dispatch.device-wait") == "last"
            and next_task_waits(access.worker)):
        queued.leave(f"{what} on chunks {_span(indices)} of allocation {out.alloc_id}")
        return
    earlier = queued.named()
    try:
        backend.synchronize()
    except Exception as e:  # a fault ends the CUDA context
        err = kernel_error(what, out, indices, access, e)
        if earlier:
            err = KernelError(f"{err}; queued before it without a wait: {'; '.join(earlier)}")
        raise err from None


@contextlib.contextmanager
def device_task(access: Access, what: str, out: ArraySpec, indices, may_leave: bool = True):
    """The part of a task that queues device work for chunks ``indices`` of ``out``; then
    ``finish_on_device``. A body that fails waits for the device all the same: an
    earlier task may have left its work running for this one. The body's own error is
    the one raised; a device fault found then is raised by the next task that waits."""
    try:
        yield
    except BaseException:
        backend = access.store.backend
        with contextlib.suppress(Exception):
            backend.synchronize()
        raise
    finish_on_device(access, what, out, indices, may_leave)


def next_task_waits(worker) -> bool:
    """Is another dgvm task ready to run on ``worker``, waiting only for a thread? It
    finishes its own device work after this task's (``finish_on_device``)."""
    try:
        for tasks in (worker.state.ready, worker.state.constrained):
            if any(str(ts.key).startswith("dgvm-") for ts in tasks):
                return True
    except RuntimeError:  # the event loop, which owns them, changed one meanwhile: wait
        pass
    return False


def _span(indices) -> str:
    indices = list(indices)
    return str(indices) if len(indices) <= 4 else f"[{indices[0]}, ..., {indices[-1]}] ({len(indices)})"


def kernel_error(what: str, out: ArraySpec, indices, access: Access, e: Exception) -> KernelError:
    """``e``, raised by ``what`` on chunks ``indices`` of ``out`` here, as the caller's
    ``KernelError`` naming the kernel, the chunk (block) and the worker, with the traceback."""
    where = f"of allocation {out.alloc_id} on worker {access.worker.address}"
    if len(indices) == 1:
        block = out.block(indices[0])
        return KernelError(f"{what} failed on chunk {indices[0]} (block {block}) {where}: "
                           f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    return KernelError(f"{what} failed on chunks {list(indices)} {where}: {type(e).__name__}: {e}")


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


def _launch_here(kernel, out: ArraySpec, specs, halo, pass_origin, tpb, indices, deps):
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


def settle(futures) -> None:
    """Wait for futures; turn a worker's exception into the caller's error."""
    if not futures:
        return
    dask_wait(futures)
    for f in futures:
        if f.status == "error":
            with detached_task_errors():
                f.result()  # raises the remote exception (KernelError, OutOfDeviceMemory, ...)
