"""A failed operation's error is raised once; the arrays it would have written stay usable.

A task that fails (a kernel that raised, a chunk that was lost) fails the tasks ordered
after it too: Dask fails a task whose dependency failed, so those never run, as the
statements after a raising one never run in a NumPy program. The arrays they would have
written keep their values as before the call (a launch is all or nothing,
``dgvm.worker.kernel_tasks``; a task that never ran wrote nothing).

The first call that waits for one of these tasks (``wait``, a read, a reduction) raises
the error. From then on the operation is *told* (the tasks of one ``dispatch.submit``,
those that fail later too), with the failed operations it was ordered after: no new
task follows its failed tasks (``pending.unfinished``) and no wait raises them again, so
the next read and the next launch of its output work, as after a NumPy call that
raised. Without this, one failed launch would fail every later use of its output.

Except the tasks that fill a new result (a deferred array being computed,
``ArrayCore._fill``): a result whose computation failed has no values, so they raise their
error at every wait (and every task that follows them fails with it).

A ``ChunkLost`` is told as any other error: the lost chunks stay lost (the chunk map marks
them, and every later use of one raises a ``ChunkLost`` of its own), but an array that
holds none, written by an operation that read a lost chunk, is read and written again as
usual, and so are the chunks of a damaged array that survive.

A task that had finished on a worker that then left fails too: Dask computes a finished
task again where its result was held, and the scheduler fails it there with ``ChunkLost``
(``scheduler.departures``). What it did is done (lost with the chunks that were there), so
the scheduler names it to its client first (``ran``): no wait raises its failure and no
new task follows it, or an array that lost nothing would fail its next use.

A failed task may end before the tasks it followed: one that follows a failed task fails
at once, on the caller or on its worker, though others it follows still wait or run
there; Dask fails a task as soon as one of its dependencies failed. Until those end, the
failed task stands for them (``behind``): the arrays' pending lists keep what a later
task must follow through it (``dgvm.client.pending``), or a write after the error was
raised would run beside a read it should follow, and a free beside a task still using the
memory.

State per task, held weakly: a future no array's pending lists hold any more needs none.
The tasks a task followed are held strongly until it ends (a Dask future the caller no
longer holds is released, and its task's end could not be seen any more), and those a
failed task stands for until a use finds them ended.
"""

from __future__ import annotations

import collections
import weakref


class _Operation:
    """The tasks of one ``submit``: told once one of them was raised; a fill never is."""

    __slots__ = ("told", "fill", "__weakref__")

    def __init__(self):
        self.told = False
        self.fill = False


class _Failure:
    """A failed task's place among failures: its operation and the failures it followed
    (``tell`` tells them all). Holds no task, so a chain of failed tasks keeps none alive."""

    __slots__ = ("op", "after")

    def __init__(self, op):
        self.op = op
        self.after: list = []


# Task -> its operation. Task -> the tasks it was ordered after, until it ends; then, if
# it failed, its ``_Failure`` and the tasks it stands for.
_operation: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_followed: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_failure: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_stands_for: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
FAILED = ("error", "cancelled", "lost")  # a Dask future's; a direct task's is "error"
# Keys of tasks that had finished on a worker that left (their failure is no one's).
_ran: "collections.OrderedDict[str, None]" = collections.OrderedDict()
RAN_REMEMBERED = 65536


def submitted(futures, deps) -> None:
    """``futures`` are the tasks of one operation, each ordered after ``deps[i]``."""
    op = _Operation()
    for f, after in zip(futures, deps):
        _operation[f] = op
        if after:
            _followed[f] = list(after)
            if hasattr(f, "on_end"):  # a direct task
                f.on_end(_ended)
            else:  # a Dask future
                f.add_done_callback(_ended)


def _ended(future) -> None:
    """(Any thread; maybe twice.) A task that finished stands for none of those it
    followed; one that failed keeps its ``_Failure`` and, strongly, only the tasks still
    running behind it: flat, so a chain of failed tasks holds no failed task alive and
    is not walked again at each use. (Written before ``_followed`` lets go; readers read
    ``_followed`` first.)"""
    deps = _followed.get(future)
    if deps is None:
        return
    if future.status in FAILED:
        _node(future, deps)
        _stands_for[future] = _running(deps)
    _followed.pop(future, None)


def _node(task, deps=None) -> _Failure:
    """The ``_Failure`` of failed ``task`` (made now, with those of the failed tasks it
    followed, where their ends were not handled yet)."""
    if deps is None:
        deps = _followed.get(task, ())
    node = _failure.get(task)
    if node is not None:
        return node
    node = _failure.setdefault(task, _Failure(_operation.get(task)))
    work = [(node, deps)]
    while work:
        n, ds = work.pop()
        for d in ds:
            if d.status != "error":  # (the errors raised with it: ``tell``)
                continue
            d_deps = _followed.get(d, ())
            dn = _failure.get(d)
            if dn is None:
                dn = _failure.setdefault(d, _Failure(_operation.get(d)))
                work.append((dn, d_deps))
            n.after.append(dn)
    return node


def _running(tasks) -> list:
    """Those of ``tasks`` that have not ended, and in place of each failed one those it
    stands for."""
    out, seen, stack = [], set(), list(reversed(tasks))  # (in their order)
    while stack:
        d = stack.pop()
        if id(d) in seen or d.status == "finished":
            continue
        seen.add(id(d))
        if d.status not in FAILED:
            out.append(d)
            continue
        deps = _followed.get(d, ())  # (first: ``_ended`` writes the other before this goes)
        stands = _stands_for.get(d)
        stack += reversed(stands if stands is not None else deps)
    return out


def behind(future) -> list:
    """The tasks ``future`` was ordered after, directly or through failed ones, that have
    not ended: what it stands for, if it failed (nothing, if not)."""
    if future.status not in FAILED:
        return []
    deps = _followed.get(future, ())  # (first: as in ``_running``)
    stands = _stands_for.get(future)
    if stands is None:  # (its end was not handled yet)
        return _running(deps)
    if not stands:
        return []
    now = _running(stands)
    _stands_for[future] = now  # (those that ended since are forgotten)
    return list(now)


def ran(keys) -> None:
    """The tasks ``keys`` had finished on a worker that left: their failure, which follows,
    counts as told."""
    for k in keys:
        _ran[k] = None
    while len(_ran) > RAN_REMEMBERED:
        _ran.popitem(last=False)


def told(future) -> bool:
    """Whether ``future`` failed and its operation's error was raised to a caller already
    (or it had finished before its worker left)."""
    if future.key in _ran and future.status == "error":
        return True
    op = _operation.get(future)
    return op is not None and op.told and not op.fill and future.status == "error"


def operation(future):
    """The operation ``future`` is a task of (None if unknown): its tasks fail together."""
    return _operation.get(future)


def fill(futures) -> None:
    """``futures`` compute a new result: their failure is never told."""
    for f in futures:
        op = _operation.get(f)
        if op is not None:
            op.fill = True


def tell(futures) -> None:
    """The error of the failed ones among ``futures`` was raised to a caller: tell their
    operations, and the failed operations they were ordered after (their error is the
    one raised)."""
    stack = [_node(f) for f in futures if f.status == "error"]
    seen = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op is not None:
            node.op.told = True
        # Told for good: a later tell that reaches this one need not go on.
        stack += node.after
        node.after = []
