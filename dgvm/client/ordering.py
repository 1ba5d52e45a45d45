"""Which earlier tasks a new task must follow: those that touch the chunks it touches.

Each array keeps the futures of the tasks that last wrote it and of later ones that read
it (``dgvm.client.pending.Pending``). A new task is ordered after them by taking them as
Dask dependencies, and Dask then copies every dependency's result to the worker that runs
the task first: a worker-to-worker request for each dependency that ran elsewhere. In a
loop of operations on arrays spread over several workers (``y = f(x)`` again and again),
each task then waited for a round trip to the other worker, although it touched none of
the chunks that worker's task had.

Most tasks are *aligned*: the task on a worker writes chunks ``I`` of its output and reads
chunks ``I`` (the same block indices) of inputs of the output's grid, nothing else: an
elementwise result without broadcasting or views, a launch without halo. For these the
block indices are recorded, and a later task skips an aligned one whose indices share
none with its own. Every task writes only its own chunks of its output, whatever it reads
(a matrix product reads whole rows and columns): those are recorded too, and an aligned
task skips a writer of its inputs that wrote none of the chunks it reads. Everything else
is kept: a task not recorded may have read or written any chunk.

A failure passes on chunk by chunk: a task that failed fails the later tasks of its
chunks (Dask fails a task whose dependency failed), not those of other chunks. So after
``y`` failed on one worker, ``w += y`` updates the chunks whose part of ``y`` was made and
``w.wait()`` raises y's error; the caller learns of it either way, and an operation that
fails by itself may also have written some of its chunks. Staged launches (all or
nothing) give all their first tasks the same dependencies (``dgvm.client.dispatch``).
"""

from __future__ import annotations

import weakref

from dgvm.client.pending import unfinished


class TaskChunks:
    """The block indices each aligned task of a session touched, in every array it used,
    and the chunks each task wrote of its output (a session part:
    ``session.part(TaskChunks)``). Weak: a future that is no longer held by any array's
    pending lists needs no entry."""

    def __init__(self, session=None):
        self._touched: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        # future -> (alloc id of the array it wrote, the chunk indices it wrote of it, that
        # allocation's ``Pending.last``)
        self._wrote: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def record(self, futures, indices, aligned: bool) -> None:
        """Note that each task of ``futures`` (one per entry of ``indices``) touched only
        its chunks ``indices[i]`` of every array, if ``aligned``; else nothing is noted."""
        if aligned:
            for f, idx in zip(futures, indices):
                self._touched[f] = frozenset(idx)

    def wrote(self, futures, alloc_id: int, indices, last: dict | None = None) -> None:
        """Note that each task of ``futures`` wrote chunks ``indices[i]`` of allocation
        ``alloc_id`` and no other chunk of it, whatever it read: a later task that reads
        other chunks of it need not follow it. ``last``: the allocation's chunk -> key of
        its last writer so far (``Pending.last``), brought up to date."""
        for f, idx in zip(futures, indices):
            idx = frozenset(idx)
            self._wrote[f] = (alloc_id, idx, last)
            if last is not None:
                for c in idx:
                    last[c] = f.key

    def wrote_nothing(self, futures) -> None:
        """Note that the tasks of ``futures`` write no array (a reduction's, which return
        their parts): a task that follows one need not take it for a writer
        (``last_writers``)."""
        for f in futures:
            self._wrote[f] = (None, frozenset(), None)

    def _may_touch(self, f, indices: frozenset) -> bool:
        touched = self._touched.get(f)
        return touched is None or not touched.isdisjoint(indices)

    def _written(self, f, alloc_id: int) -> frozenset | None:
        """The chunks of allocation ``alloc_id`` that ``f`` may have written: those it
        wrote of it, else those it touched (aligned); None: any."""
        wrote = self._wrote.get(f)
        if wrote is not None and wrote[0] == alloc_id:
            return wrote[1]
        return self._touched.get(f)

    def _may_have_written(self, f, alloc_id: int, indices: frozenset) -> bool:
        written = self._written(f, alloc_id)
        return written is None or not written.isdisjoint(indices)

    def last_writers(self, deps, worker: str, limit: int = 1024) -> dict:
        """Of the tasks ``deps`` a task on ``worker`` follows, those of other workers
        (direct tasks: ``key``, ``worker``) that were the last given some chunks to write
        (``Pending.last``: no task submitted since wrote them): task key -> [its worker,
        alloc id, those chunks]. What such a task left in those chunks is what the new
        task must read of them: a later write is by a task that follows the new one
        (``dgvm.worker.pushes``). A task whose writes are not recorded may have written
        anything: then none is named. (At most ``limit`` chunks per task.)"""
        if len(deps) > 64:
            return {}
        wrote = [self._wrote.get(d) for d in deps]
        if any(w is None for w in wrote):
            return {}
        fresh = {}
        for d, (alloc_id, chunks, last) in zip(deps, wrote):
            where = getattr(d, "worker", None)
            if where is None or where == worker or last is None:
                continue
            named = sorted(c for c in chunks if last.get(c) == d.key)
            if named and len(named) <= limit:
                fresh[d.key] = [where, alloc_id, named]
        return fresh

    def after(self, indices, aligned: bool, out_tasks, input_writers) -> list:
        """The futures a task must follow that writes chunks ``indices`` of an output
        (and, if ``aligned``, reads only chunks ``indices`` of inputs of the output's
        grid).

        ``out_tasks``: the output's earlier writers and the readers since;
        ``input_writers``: (alloc id, the writers of it) per input. A writer of the
        output wrote, and a reader read, only the chunks it touched; an input's writer
        matters to an aligned task only where it wrote the chunks the task reads."""
        idx = frozenset(indices)
        keep = [f for f in out_tasks if self._may_touch(f, idx)]
        for alloc_id, writers in input_writers:
            if aligned:
                keep += [f for f in writers if self._may_have_written(f, alloc_id, idx)]
            else:
                keep += list(writers)
        return list(dict.fromkeys(keep))  # (the output may be an input too)

    def beyond(self, pending, alloc_id: int, written: frozenset, aligned: bool) -> tuple[list, list]:
        """What a write of only chunks ``written`` of an array (allocation ``alloc_id``)
        leaves pending, as (writers, readers), from its ``pending`` before the write:
        what later tasks that use the other chunks must still follow, since they may skip
        the new write's tasks (``after``).

        A writer stays a writer if it may have written other chunks (read-after-write:
        aligned readers of those follow it). Readers, and, when the new write is
        ``aligned``, writers that may have read any chunk, stay readers if they may have
        touched other chunks (write-after-read: later writers of those follow them). When
        the new write is not aligned, later writers follow all of its tasks, which
        followed every reader that was not recorded (``after``): those need not stay."""
        def wrote_other(f) -> bool:
            chunks = self._written(f, alloc_id)
            return chunks is None or not chunks <= written

        def read_other(f) -> bool:
            touched = self._touched.get(f)
            return not touched <= written if touched is not None else aligned

        writers, readers = [], []
        for f in unfinished(pending.writes):
            if wrote_other(f):
                writers.append(f)
            elif read_other(f):
                readers.append(f)
        readers += [f for f in pending.readers() if read_other(f)]
        return writers, readers


def input_writers(inputs) -> list:
    """(alloc id, its unfinished writers) of each of ``inputs`` (arrays), as ``after``
    takes them."""
    return [(a.alloc.alloc_id, unfinished(a.pending.writes)) for a in inputs]
