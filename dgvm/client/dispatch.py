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

import dask
from dgvm.client import direct as plane
from dgvm.client import failures
from dgvm.client.ordering import TaskChunks, input_writers
from dgvm.client.pending import unfinished
from dgvm.client.session import ensure_open, session_of
from dgvm.protocol.errors import detached_task_errors
from dgvm.protocol.messages import ALLOCATIONS_ANNOTATION, RERUN_ANNOTATION, TASK_PREFIX
from dgvm.protocol.records import ArraySpec

# Seconds a failed operation's error waits for the operation's other running tasks to end
# (``_ended``); past it the error is raised all the same.
ENDED_WAIT = 30.0


def submit(client, fn, args: tuple, homes: dict[str, list[int]], deps, name: str,
           rerun: str | None = None, results: bool = False) -> list:
    """One task ``fn(*args, indices, after)`` per worker of ``homes`` (worker -> chunk
    indices), pinned there, following the tasks ``deps`` (one list for all or a dict per
    worker); ``after`` is the list of their results when ``results`` (else anything).
    Returns the futures in ``homes``' order. ``rerun``: a task whose worker leaves may
    run again where copies of its chunks took over (``RERUN_ANNOTATION``): ``"writes"``
    (it writes only its own chunks and passes over those its first run wrote; also when
    it had finished), ``"reads"`` (only before it finished: later writers may have
    changed what it read since).

    The tasks go straight to the workers (``dgvm.client.direct``) or, with
    ``dgvm.dispatch.plane: tasks``, through Dask's scheduler as Dask tasks."""
    ensure_open(client)
    afters = [deps[w] if isinstance(deps, dict) else deps for w in homes]
    # The allocations it names: a task stranded on a worker that left says which it lost.
    allocations = sorted(_allocations_in(args))
    keys = [f"{TASK_PREFIX}{name}-{uuid.uuid4().hex[:10]}" for _ in homes]
    if plane.enabled():
        futures = session_of(client).part(plane.DirectPlane).submit(
            fn, args, homes, afters, keys, rerun or "", allocations, results)
    else:
        with dask.annotate(**{ALLOCATIONS_ANNOTATION: allocations, RERUN_ANNOTATION: rerun or ""}):
            futures = [
                client.submit(
                    fn, *args, idx, after, workers=[w], allow_other_workers=False, pure=False, key=key,
                )
                for (w, idx), after, key in zip(homes.items(), afters, keys)
            ]
    failures.submitted(futures, afters)  # one operation: its error is raised once
    return futures


def _allocations_in(value, depth: int = 0) -> set:
    """The allocation ids of the ``ArraySpec`` records in a task's arguments (in lists and
    tuples a few levels down, as launches and operations pass them)."""
    if isinstance(value, ArraySpec):
        return {int(value.alloc_id)} if value.alloc_id >= 0 else set()
    if depth < 3 and isinstance(value, (list, tuple)) and len(value) <= 64:  # not a user's data
        return set().union(*(_allocations_in(v, depth + 1) for v in value))
    return set()


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
    writers = input_writers(inputs)
    client = out.alloc.client
    touched = out.alloc.session.part(TaskChunks)
    homes = out.alloc.by_home(chunks)
    if then is None:
        deps = {w: touched.after(idx, aligned, out_tasks, writers) for w, idx in homes.items()}
    else:
        # All or nothing: an earlier failure must stop every first task, or those of the
        # other workers would stage copies that no second task ever takes. (Every earlier
        # task touched some chunk of out, so each follows all of them.)
        deps = out_tasks + [f for _, fs in writers for f in fs]
    # (Both steps of a staged launch run again: a step 1 run again adds its copies to
    # those of the worker it runs on, and each step 2 takes its own chunks.)
    futures = submit(client, fn, task_args, homes, deps, name, rerun="writes" if then is None else "reads")
    touched.record(futures, homes.values(), aligned)
    readers = futures  # the first tasks read the inputs; the second ones only write out
    if then is not None:
        fn2, *args2 = then
        futures = submit(client, fn2, tuple(args2), homes, futures, f"{name}-commit", rerun="writes",
                         results=True)
        touched.record(futures, homes.values(), aligned)
    if getattr(out.alloc, "unfilled", False):
        # The first write of a result not zero-filled: if it fails the result has no
        # values, so its error is raised at every read, never only once.
        failures.fill(futures)
        out.alloc.unfilled = False
    touched.wrote(futures, out.alloc.alloc_id, homes.values(), out.pending.last)
    if chunks is None:
        out.pending.wrote(futures)
    else:  # some chunks written: what may have touched the others stays to be followed
        written = frozenset(i for idx in homes.values() for i in idx)
        out.pending.wrote(futures, *touched.beyond(out.pending, out.alloc.alloc_id, written, aligned))
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
    try:
        with detached_task_errors():
            return plane.gather(client, futures, direct=direct)
    except Exception:
        _ended([f for f in futures if f.status == "error"], futures)
        failures.tell(futures)  # raised here: once
        raise


def _ended(failed, futures) -> None:
    """Wait for the other tasks among ``futures`` of the operations of ``failed`` to end
    (they fail with it, or write what they write): once its error is raised, new tasks
    follow none of its failed tasks (``pending.unfinished``), and one still running then
    would be followed, and fail them with the error raised already. They end soon: tasks
    of a worker that left fail at once (``scheduler.departures``)."""
    ops = {failures.operation(f) for f in failed} - {None}
    rest = [f for f in futures if not f.done() and failures.operation(f) in ops]
    if rest:
        try:
            plane.wait(rest, timeout=ENDED_WAIT)
        except Exception:  # noqa: BLE001  (a timeout: the error is raised all the same)
            pass


def wait_raising(futures) -> None:
    """Wait for the tasks of ``futures`` to end; raise the first error here as soon as one
    fails, as it was raised on its worker (``DArray.wait`` waits so for an array's
    writers). An error is raised once (``dgvm.client.failures``): failures raised before
    are passed over, but what they stand for (``failures.behind``: an earlier write they
    followed may still run) is waited for, its errors left to their own arrays."""
    own = [f for f in futures if not failures.told(f)]

    def untold_failures():
        return [f for f in own if f.status == "error" and not failures.told(f)]

    running = own
    while running and not untold_failures():
        # Until the first failure (a lost worker's comes at once), not the last task.
        running = plane.wait_first_failure(running)
    failed = untold_failures()
    if failed:
        _ended(failed, own)
        failures.tell(failed)
        with detached_task_errors():
            failed[0].result()  # raises the remote exception (KernelError, OutOfDeviceMemory, ...)
    _stood_for(futures)


def _stood_for(futures) -> None:
    """Wait, without raising their errors, for the tasks the failed ones among
    ``futures`` stand for (``failures.behind``), and for those the ones among them that
    fail meanwhile stand for in turn."""
    while True:
        running = [d for f in futures for d in failures.behind(f)]
        if not running:
            return
        plane.wait(running)
