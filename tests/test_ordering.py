"""A task follows only the earlier tasks that touched its chunks (dgvm.client.ordering):
a loop of aligned operations moves nothing between workers, and every other task keeps
its order."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as dnp
from dgvm.client.ordering import TaskChunks


class _Task:
    """Stands in for a future: ordering only needs it hashable and weakly referable, and
    not finished."""

    status = "pending"
    key = "a-task"


def test_an_aligned_task_skips_the_tasks_of_other_chunks():
    a, b, unknown = _Task(), _Task(), _Task()
    ordering = TaskChunks()
    ordering.record([a, b], [[0, 1], [2, 3]], aligned=True)
    # Writers and readers of the output: only those that touched chunks 2 or 3, and those
    # not recorded (they may have touched any chunk).
    assert ordering.after([2, 3], True, [a, b, unknown], []) == [b, unknown]
    # Writers of an input: skipped by an aligned task only.
    assert ordering.after([0], True, [], [(7, [a, b, unknown])]) == [a, unknown]
    assert ordering.after([0], False, [], [(7, [a, b, unknown])]) == [a, b, unknown]
    # A task that was not aligned is never recorded.
    c = _Task()
    ordering.record([c], [[5]], aligned=False)
    assert ordering.after([0], True, [c], []) == [c]


def test_an_aligned_reader_skips_writers_of_other_chunks_whatever_they_read():
    """A task writes only its own chunks of its output, whatever it read (a matrix
    product reads whole rows): an aligned task that reads other chunks of that array does
    not follow it; a task reading the array's chunks anyhow, or reading another array the
    writer did not write (an allocation taken over from a released array), still does."""
    p, q, unknown = _Task(), _Task(), _Task()
    ordering = TaskChunks()
    ordering.record([p, q], [[0, 1], [2, 3]], aligned=False)  # read anything
    ordering.wrote([p, q], 7, [[0, 1], [2, 3]])  # wrote chunks 0, 1 and 2, 3 of allocation 7
    assert ordering.after([2], True, [], [(7, [p, q, unknown])]) == [q, unknown]
    assert ordering.after([2], False, [], [(7, [p, q, unknown])]) == [p, q, unknown]
    assert ordering.after([2], True, [], [(8, [p, q])]) == [p, q]  # (not what they wrote)
    # As writers or readers of the output, they may have read any chunk of it.
    assert ordering.after([2], True, [p, q], []) == [p, q]


def _transfers(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.state.transfer_incoming_count_total).values())


def test_a_loop_of_elementwise_results_moves_nothing_between_workers(case):
    case.needs_workers(2, "chunks spread over workers")
    h = np.random.default_rng(3).random((200, 300))
    x = dnp.from_numpy(h, chunks=(50, 100), placement="round_robin")
    x.wait()
    assert len(set(x.locations().values())) > 1
    before = _transfers(case.client)
    # Each result is started before the last one finished: its tasks are ordered after the
    # unfinished tasks that used the same chunks (the released result's allocation is
    # reused), which ran on the same worker.
    for k in range(30):
        y = ((x * float(k) + 1.0) * x).persist()
    z = (y - x).persist()
    np.testing.assert_allclose(dnp.asnumpy(z), (h * 29.0 + 1.0) * h - h, rtol=1e-12)
    assert _transfers(case.client) == before


def test_a_transposed_reader_still_follows_every_writer(case):
    h = np.random.default_rng(4).random((120, 120))
    x = dnp.from_numpy(h, chunks=40, placement="round_robin")
    for k in range(1, 6):
        x = (x + 1.0).persist()  # aligned writers of chunks all over the cluster
        t = (x.T * 2.0).persist()  # reads other workers' chunks: follows all of them
        np.testing.assert_allclose(dnp.asnumpy(t), 2.0 * (h + k).T, rtol=1e-12)


@dgvm.kernel
def _checked_copy(x, out):  # may raise: on cpu a launch of it is staged (all or nothing)
    i = cuda.grid(1)
    if i < out.size:
        if x[i] < 0:
            raise ValueError("negative")
        out[i] = x[i]


def test_a_staged_launch_after_a_failure_on_one_worker_stages_nothing(case):
    if case.backend != "cpu":
        pytest.skip("launches are staged on cpu only")
    x = dnp.from_numpy(np.arange(30), chunks=5, placement="round_robin")
    e = np.ones(30, dtype=np.int64)
    e[3] = -1  # NumPy: integers to negative integer powers are not allowed
    e = dnp.from_numpy(e, chunks=5, colocate=x)
    y = (x ** e).persist()  # fails on chunk 0's worker only
    # Placed as x: the workers without chunk 0 have launch chunks none of y's failure touched.
    out = dnp.from_numpy(np.zeros(30, dtype=np.int64), chunks=5, colocate=x)
    try:
        dgvm.launch(_checked_copy, y, out=out)
        with pytest.raises(ValueError, match="negative integer powers"):
            out.wait()
        y.settle()  # every task that reads y has ended
        # No worker holds copies that no commit will take.
        assert set(case.client.run(lambda dask_worker: dask_worker.extensions["dgvm"].staged_launches()).values()) == {0}
    finally:
        # The error, kept by the failed tasks' futures, holds this frame and its arrays.
        for a in (out, y, e, x):
            a.free()


def test_a_write_of_some_chunks_leaves_pending_what_touched_the_others():
    """After a write of chunk 0 only: a writer of chunk 1 stays a writer (its readers
    follow it); a reader of chunk 1 stays a reader (its next writer follows it); what
    touched chunk 0 alone goes (the new write followed it). A writer that may have read
    any chunk stays a reader only when the new write is aligned: later writers skip an
    aligned write's tasks of other chunks, but follow every task of one that is not."""
    class _Pending:
        def __init__(self, writes, reads):
            self.writes, self.reads = writes, reads

        def readers(self):
            return list(self.reads)

    w0, w1, anyhow, r0, r1, r_any = (_Task() for _ in range(6))
    ordering = TaskChunks()
    ordering.record([w0, w1, r0, r1], [[0], [1], [0], [1]], aligned=True)
    ordering.wrote([w0, w1], 7, [[0], [1]])
    ordering.wrote([anyhow], 7, [[0]])  # wrote chunk 0, read who knows what
    pending = _Pending([w0, w1, anyhow], [r0, r1, r_any])
    written = frozenset([0])
    assert ordering.beyond(pending, 7, written, aligned=True) == ([w1], [anyhow, r1, r_any])
    assert ordering.beyond(pending, 7, written, aligned=False) == ([w1], [r1])


class _Ending(_Task):
    """A stand-in future whose end the test sets."""

    def __init__(self, key):
        self.key, self._callbacks = key, []

    def on_end(self, fn):
        self._callbacks.append(fn)

    def end(self, status):
        self.status = status
        for fn in self._callbacks:
            fn(self)


def test_a_failed_task_stands_for_the_tasks_it_followed_until_they_end():
    """``w`` followed ``c`` and ``r``, and ``n`` followed ``w``: ``w`` failed while both
    still ran. Writers and readers lists, and what a free waits for, name ``c`` and ``r``
    through it (through ``n`` too once ``n`` failed); a finished one stands for nothing,
    and one that finished forgets what it followed."""
    from dgvm.client import failures
    from dgvm.client.pending import Pending, still_reading, unfinished

    c, r, w, n, ok = (_Ending(k) for k in "crwno")
    failures.submitted([w], [[c, r]])
    failures.submitted([n], [[w]])
    failures.submitted([ok], [[c]])
    w.end("error")
    assert unfinished([w]) == [w, c, r]  # its error not raised yet: still followed itself
    failures.tell([w])
    assert failures.told(w)
    assert unfinished([w]) == [c, r] and still_reading([w]) == [c, r]
    n.end("error")
    assert unfinished([n]) == [n, c, r]
    pending = Pending()
    pending.wrote([w])
    assert pending.writers() == [c, r] and pending.take() == [w, c, r]
    c.end("finished")
    assert unfinished([w]) == [r]
    r.end("error")  # a failure it stood for: what that one followed (nothing)
    assert unfinished([w]) == [] and still_reading([n]) == []
    assert failures._followed.get(ok) == [c]
    ok.end("finished")
    assert failures._followed.get(ok) is None and failures.behind(ok) == []


def test_a_chain_of_failed_tasks_holds_only_what_still_runs():
    """2000 tasks, each behind the one before, fail one after the other while the task the
    first followed still runs: each stands for that one alone, holds no failed task alive
    (only weakly, for ``tell``), and answers without walking the chain."""
    import gc
    import weakref

    from dgvm.client import failures
    from dgvm.client.pending import unfinished

    running = _Ending("running")
    chain = [_Ending("t0")]
    failures.submitted([chain[0]], [[running]])
    for i in range(1, 2000):
        chain.append(_Ending(f"t{i}"))
        failures.submitted([chain[-1]], [[chain[-2]]])
    for t in chain:
        t.end("error")
    last = chain[-1]
    assert failures.behind(last) == [running] and failures._stands_for[last] == [running]
    first = weakref.ref(chain[0])
    del chain[:-1], t
    gc.collect()
    assert first() is None  # (no failed task holds another)
    failures.tell([last])
    assert unfinished([last]) == [running]
    running.end("finished")
    assert unfinished([last]) == [] and failures._stands_for[last] == []


@pytest.mark.parametrize("plane", ["direct", "tasks"])
def test_tasks_that_finished_hold_nothing_they_followed(case, plane):
    """A loop of 50 writes sent without waiting: each task holds the one before until it
    finishes; none does once they all did (a long loop keeps no chain of them)."""
    import time

    import dask

    from dgvm.client import failures

    with dask.config.set({"dgvm.dispatch.plane": plane}):
        x = dnp.zeros(64, chunks=16)
        tasks = []
        for _ in range(50):
            x += 1
            tasks += x.pending.writes
        x.wait()
    deadline = time.monotonic() + 30  # (a direct task's callbacks run just after its wait ends)
    while any(failures._followed.get(f) for f in tasks) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(failures._followed.get(f) for f in tasks)
    assert not [f for f in list(failures._followed.keys()) if f.status == "finished"]
    np.testing.assert_array_equal(dnp.asnumpy(x), np.full(64, 50.0))
    x.free()


def test_tell_reaches_through_a_failed_task_no_one_holds():
    """t1 failed, t2 behind it, t3 behind t2; t2 is dropped. t3's error raised: t1's
    operation is told too (its error is the one raised)."""
    import gc

    from dgvm.client import failures

    src, t1, t2, t3 = (_Ending(k) for k in ("src", "t1", "t2", "t3"))
    failures.submitted([t1], [[src]])
    failures.submitted([t2], [[t1]])
    failures.submitted([t3], [[t2]])
    for t in (src, t1, t2, t3):
        t.end("error")
    del t, t2
    gc.collect()
    failures.tell([t3])
    assert failures.told(t1)


class _SwitchAfterGet(dict):
    """A table whose next ``get`` lets another thread's step run right after it answers
    (a thread switch at the worst moment)."""

    step = None

    def get(self, key, default=None):
        value = super().get(key, default)
        step, type(self).step = type(self).step, None
        if step is not None:
            step()
        return value


@pytest.mark.parametrize("table", ["_stands_for", "_failure"])
def test_a_failed_tasks_end_handled_between_two_lookups_loses_nothing(monkeypatch, table):
    """``f`` failed; its end is handled (Dask's callback thread) right between a reader's
    lookups: ``behind`` still names what it stands for, and ``tell`` still reaches the
    failure it followed."""
    from dgvm.client import failures

    src, running, f = _Ending("src"), _Ending("running"), _Ending("f")
    failures.submitted([f], [[src, running]])
    src.end("error")
    f.status = "error"  # its callback not run yet
    monkeypatch.setattr(failures, table, _SwitchAfterGet())
    failures.submitted([src], [[]])  # (its operation, to be told)
    _SwitchAfterGet.step = lambda: failures._ended(f)
    if table == "_stands_for":
        assert failures.behind(f) == [running]
    else:
        failures.tell([f])
        assert failures.told(src)


def test_a_wait_waits_for_what_a_told_failure_stands_for_and_raises_none_of_its_errors():
    """y's writer ``f`` failed at once (the writer of its input failed), behind ``w``
    (``y += 1``) and ``r`` (``z = y * 2``), both still running; f's error was raised. A
    wait of y waits for both; r then fails with its own error, which is z's: the wait
    does not raise it, and it stays to be raised by z's wait."""
    import threading

    from dgvm.client import failures
    from dgvm.client.direct import DirectTask
    from dgvm.client.dispatch import wait_raising

    def task(key):
        return DirectTask(key, "a-worker", None, [])

    a, w, r, f = (task(k) for k in "awrf")
    failures.submitted([a, w], [[], []])
    failures.submitted([r], [[w]])
    failures.submitted([f], [[w, r, a]])
    a._fail(RuntimeError("a's error"))
    f._fail(RuntimeError("a's error"))
    failures.tell([f])
    threading.Timer(0.2, lambda: (w._end("finished", None), r._fail(ValueError("z's own error")))).start()
    wait_raising([f])  # y.wait()
    assert w.done() and r.done() and not failures.told(r)
