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
none with its own. Everything else is kept: a task not recorded may have read or written
any chunk.

A failure passes on chunk by chunk: a task that failed fails the later tasks of its
chunks (Dask fails a task whose dependency failed), not those of other chunks. So after
``y`` failed on one worker, ``w += y`` updates the chunks whose part of ``y`` was made and
``w.wait()`` raises y's error; the caller learns of it either way, and an operation that
fails by itself may also have written some of its chunks. Staged launches (all or
nothing) give all their first tasks the same dependencies (``dgvm.client.dispatch``).
"""

from __future__ import annotations

import weakref


class TaskChunks:
    """The block indices each aligned task of a session touched, in every array it used
    (a session part: ``session.part(TaskChunks)``). Weak: a future that is no longer held
    by any array's pending lists needs no entry."""

    def __init__(self, session=None):
        self._touched: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def record(self, futures, indices, aligned: bool) -> None:
        """Note that each task of ``futures`` (one per entry of ``indices``) touched only
        its chunks ``indices[i]`` of every array, if ``aligned``; else nothing is noted."""
        if aligned:
            for f, idx in zip(futures, indices):
                self._touched[f] = frozenset(idx)

    def _may_touch(self, f, indices: frozenset) -> bool:
        touched = self._touched.get(f)
        return touched is None or not touched.isdisjoint(indices)

    def after(self, indices, aligned: bool, out_tasks, input_writers) -> list:
        """The futures a task must follow that writes chunks ``indices`` of an output
        (and, if ``aligned``, reads only chunks ``indices`` of inputs of the output's
        grid).

        ``out_tasks``: the output's earlier writers and the readers since;
        ``input_writers``: the writers of the inputs. A writer of the output wrote, and a
        reader read, only the chunks it touched; an input's writer matters to an aligned
        task only where it wrote the chunks the task reads."""
        idx = frozenset(indices)
        keep = [f for f in out_tasks if self._may_touch(f, idx)]
        if aligned:
            keep += [f for f in input_writers if self._may_touch(f, idx)]
        else:
            keep += list(input_writers)
        return keep
