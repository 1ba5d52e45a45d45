"""The one path that sends work to workers.

An operation is one Dask task per home worker of the chunks it covers, pinned there
(``workers=[w]``, no stealing), keyed ``TASK_PREFIX...`` and ordered after the tasks that
touched its chunks. ``submit`` is the only place dgvm calls ``client.submit``; ``dispatch``
(launches and array operations), ``map_chunks`` (``dgvm.client.apply``) and reductions
(``gather``) build on it. The task bodies live on the worker's side
(``dgvm.worker.tasks``); the arrays they name travel as ``ArraySpec`` records.
"""

from __future__ import annotations

import uuid

from distributed import wait as dask_wait

from dgvm.client.ordering import TaskChunks
from dgvm.client.pending import unfinished
from dgvm.client.session import ensure_open
from dgvm.protocol.errors import detached_task_errors
from dgvm.protocol.messages import TASK_PREFIX


def submit(client, fn, args: tuple, homes: dict[str, list[int]], deps, name: str) -> list:
    """One task ``fn(*args, indices, deps)`` per worker of ``homes`` (worker -> chunk
    indices), pinned there; ``deps`` is one list for all or a dict per worker. Returns
    the futures in ``homes``' order."""
    ensure_open(client)
    return [
        client.submit(
            fn, *args, idx, deps[w] if isinstance(deps, dict) else deps,
            workers=[w], allow_other_workers=False, pure=False,
            key=f"{TASK_PREFIX}{name}-{uuid.uuid4().hex[:10]}",
        )
        for w, idx in homes.items()
    ]


def dispatch(fn, out, inputs, name: str, *task_args, then=None, aligned: bool = False,
             chunks=None) -> None:
    """Submit ``fn(*task_args, indices, deps)`` as one task per home worker of ``out``'s
    chunks, ordered after earlier tasks: after those that wrote ``inputs`` or ``out``,
    and after those that read ``out``, where they touched the task's chunks
    (``dgvm.client.ordering``; ``aligned``: each task reads only its own chunks' block
    indices of its inputs, which counts when they all have ``out``'s grid). Record the
    new tasks as writers of ``out`` and readers of ``inputs``. ``then=(fn2, *args2)``: a
    second task per worker, ``fn2(*args2, indices, results)`` with the results of every
    first task (a step all workers must finish first), recorded instead.

    ``chunks``: only these chunk indices of ``out`` are written (a write through a view);
    their workers alone get a task.

    ``out`` and ``inputs`` are arrays: ``alloc`` (the allocation handle), ``chunks``,
    ``pending`` (``dgvm.client.pending.Pending``) and ``before_write()``."""
    out.before_write()  # deferred readers of out run first
    aligned = aligned and all(a.chunks == out.chunks for a in inputs)
    out_tasks = unfinished(out.pending.writes + out.pending.readers())
    input_writers = unfinished([f for a in inputs for f in a.pending.writes])
    client = out.alloc.client
    touched = out.alloc.session.part(TaskChunks)
    homes = out.alloc.by_home(chunks)
    if then is None:
        deps = {w: touched.after(idx, aligned, out_tasks, input_writers) for w, idx in homes.items()}
    else:
        # All or nothing: an earlier failure must stop every first task, or those of the
        # other workers would stage copies that no second task ever takes. (Every earlier
        # task touched some chunk of out, so each follows all of them.)
        deps = out_tasks + input_writers
    futures = submit(client, fn, task_args, homes, deps, name)
    touched.record(futures, homes.values(), aligned)
    readers = futures  # the first tasks read the inputs; the second ones only write out
    if then is not None:
        fn2, *args2 = then
        futures = submit(client, fn2, tuple(args2), homes, futures, f"{name}-commit")
        touched.record(futures, homes.values(), aligned)
    out.pending.wrote(futures)
    add_readers([a for a in inputs if a is not out], readers)


def add_readers(arrays, futures) -> None:
    """Record ``futures`` as tasks that read ``arrays``: a later write to one of them
    waits for those still reading."""
    for a in arrays:
        a.pending.read_by(futures)


def gather(client, futures, direct: bool = False) -> list:
    """The results of ``futures``; a worker's exception raised here as it was raised
    there, without the frames that would keep the caller's arrays alive."""
    ensure_open(client)
    with detached_task_errors():
        return client.gather(futures, direct=direct)


def wait_raising(futures) -> None:
    """Wait for the tasks of ``futures`` to end; raise the first one's error here, as it
    was raised on its worker (``DArray.wait`` waits so for an array's writers)."""
    if not futures:
        return
    dask_wait(futures)
    for f in futures:
        if f.status == "error":
            with detached_task_errors():
                f.result()  # raises the remote exception (KernelError, OutOfDeviceMemory, ...)
