"""The direct plane: operations go from the caller straight to their workers.

Every answer is compared with NumPy; the scheduler is checked to hold no task of dgvm's
(its memory stays flat), errors to come with the worker's traceback, writes to wait for
the copies other workers hold, and tasks in flight on a killed worker to run again where
copies took over, once.
"""

from __future__ import annotations

import os
import signal
import traceback

import dask
import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as dnp
from dgvm.client import direct
from dgvm.client.apply import map_chunks
from dgvm.protocol.errors import ChunkLost
from killing import process_cluster
from test_fault_kernels import fails


def _dgvm_tasks(dask_scheduler):
    """What the scheduler keeps of dgvm's tasks: tasks, task groups, task prefixes."""
    return [sum(1 for k in table if str(k).startswith("dgvm-"))
            for table in (dask_scheduler.tasks, dask_scheduler.task_groups, dask_scheduler.task_prefixes)]


@dgvm.kernel
def _add_one(x, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j] + 1.0


def _program(a):
    """Operations of every kind that reaches the workers: elementwise (in place and not),
    reductions, a view write, a matmul (tasks reading other workers' chunks), a launch,
    map_chunks; returns the host results."""
    x = dnp.from_numpy(a, chunks=(8, 8), placement="round_robin")
    y = (x + 1) * 2 - x.T
    x += 1
    x[::3, 1:5] = -2.0
    z = x @ y
    out = dnp.empty_like(x)
    dgvm.launch(_add_one, x, out=out)
    total = float(z.sum())
    means = dnp.asnumpy(y.mean(axis=0))
    sums = map_chunks(x.alloc, lambda xp, c, i: float(c.view(np.float64).sum()))
    return {"x": dnp.asnumpy(x), "y": dnp.asnumpy(y), "z": dnp.asnumpy(z), "out": dnp.asnumpy(out),
            "total": total, "means": means, "sums": sum(sums)}


def _numpy(a):
    y = (a + 1) * 2 - a.T
    x = a + 1
    x[::3, 1:5] = -2.0
    z = x @ y
    return {"x": x, "y": y, "z": z, "out": x + 1, "total": z.sum(), "means": y.mean(axis=0), "sums": x.sum()}


@pytest.mark.parametrize("plane", ["direct", "tasks"])
def test_both_planes_give_numpys_answers_and_direct_leaves_no_task_on_the_scheduler(case, plane):
    client = case.client
    a = np.random.default_rng(3).standard_normal((24, 24))
    before = client.run_on_scheduler(_dgvm_tasks)
    with dask.config.set({"dgvm.dispatch.plane": plane}):
        assert direct.enabled() == (plane == "direct")
        got = _program(a)
    want = _numpy(a)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)
    after = client.run_on_scheduler(_dgvm_tasks)
    if plane == "direct":  # nothing of dgvm's in Dask's task state: the scheduler stays flat
        # (Dask keeps a task prefix for good: one the tasks plane made in an earlier test
        # of this cluster stays, and the direct plane adds none.)
        assert after == before and after[:2] == [0, 0], (before, after)
    else:  # (the check sees tasks when there are some)
        assert after[2] > 0, after


def _explode(xp, chunk, index):
    raise ValueError(f"chunk {index} is not to my liking")


def test_an_error_comes_with_the_workers_traceback_and_the_next_operation_works(case):
    x = dnp.from_numpy(np.arange(40.0), chunks=10)
    with pytest.raises(ValueError, match="is not to my liking") as err:
        map_chunks(x.alloc, _explode)
    frames = [f.name for f in traceback.extract_tb(err.tb)]
    assert "_explode" in frames, frames  # the worker's frames came with it
    np.testing.assert_array_equal(dnp.asnumpy(x + 1), np.arange(40.0) + 1)


def test_many_operations_in_flight_keep_their_order(case):
    """200 operations sent without a wait, tasks of one worker following each other and
    tasks of others (transposes, shifted views), then one read."""
    a = np.arange(36.0).reshape(6, 6)
    x = dnp.from_numpy(a, chunks=(2, 3), placement="round_robin")
    want = a.copy()
    for i in range(50):
        x += 1
        x *= 1.5
        x = x - x.T * 0.25
        x[1:, :] = x[:-1, :] + i
        want += 1
        want *= 1.5
        want = want - want.T * 0.25
        want[1:, :] = want[:-1, :].copy() + i
    np.testing.assert_allclose(dnp.asnumpy(x), want, rtol=1e-12)


def test_a_write_is_answered_once_other_workers_copies_are_gone(case, monkeypatch):
    """A matmul's tasks read chunks of other workers and keep read replicas of them; a
    write to those chunks is answered only once the replicas were dropped, and the next
    matmul sees the new values. (A chunk written since a worker's replica of it was
    dropped is read as a piece by its next few tasks there, ``access.REWRITTEN_READS``:
    each step reads one time more, so that replicas are made again.)"""
    from dgvm.worker.access import REWRITTEN_READS

    case.needs_workers(2, "replicas are copies on another worker")
    client = case.client
    # (chunks read often elsewhere stay home: on two equal workers re-homing would bring
    # them all to the reader, leaving no copy to test)
    monkeypatch.setitem(dask.config.config["dgvm"]["migration"], "rehome-after", 0)
    a = np.arange(64.0).reshape(8, 8)
    x = dnp.from_numpy(a, chunks=4, placement="round_robin")

    def replicas():
        return client.run(lambda dask_worker, i=x.alloc_id: dask_worker.extensions["dgvm"].replicas(i))

    for step in range(5):
        for _ in range(REWRITTEN_READS + 1):
            np.testing.assert_array_equal(dnp.asnumpy(x @ x), a @ a)
        assert any(replicas().values())  # (else nothing here is tested)
        x += 1
        x.wait()  # answered: no replica of the written chunks may remain
        assert not any(replicas().values()), step
        # ... and the homes know it: the next write of those chunks need not wait for the GVAT
        assert not any(client.run(lambda dask_worker, i=x.alloc_id, n=x.alloc.nchunks:
                                  dask_worker.extensions["dgvm"].may_have_copies(i, range(n))).values())
        a = a + 1
    np.testing.assert_array_equal(dnp.asnumpy(x @ x), a @ a)


@pytest.mark.slow
def test_writes_in_flight_on_a_killed_worker_are_done_once_where_copies_took_over():
    """In-place writes to an array with a copy of each chunk are in flight when the home
    of some of its chunks is killed: each runs again where the copies took over, and none
    is applied twice (``x += 1`` run twice would give one more). An array without copies
    says ChunkLost naming the worker."""
    with process_cluster("cpu", 4, "64MiB") as client:
        pids = client.run(os.getpid)
        for round_ in range(2):
            ref = np.arange(80_000, dtype=np.float64)
            x = dnp.from_numpy(ref, chunks=5_000, replicas=2, client=client)
            plain = dnp.from_numpy(ref, chunks=5_000, client=client)
            info, = [t for t in dgvm.table(chunks=True, client=client) if t.alloc_id == x.alloc_id]
            victim = info.chunks[0].worker
            for _ in range(6):
                x += 1
                plain += 1
            os.kill(pids[victim], signal.SIGKILL)
            np.testing.assert_array_equal(dnp.asnumpy(x), ref + 6)
            with pytest.raises(ChunkLost, match=victim):
                dnp.asnumpy(plain)
            x.free()
            plain.free()
            # The nanny's new worker joins; the next round kills another.
            pids = {w: p for w, p in client.run(os.getpid).items()}
        assert dgvm.table(client=client) == []


def _peer_asks(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.plugins["dgvm-store"].direct.peer_asks).values())


def test_a_task_following_another_workers_task_is_ordered_by_the_workers(case):
    """With ``dgvm.dispatch.peers``, tasks that follow tasks of other workers are sent at
    once; their worker asks the other when those ended (no round trip through the caller),
    and a failure there is theirs too."""
    if case.backend == "cuda":
        pytest.skip("GPU kernels raise only when compiled with debug=True")
    client = case.client
    a = np.arange(64.0).reshape(8, 8)
    x = dnp.from_numpy(a, chunks=(2, 8), placement="round_robin")
    h = np.arange(32, dtype=np.int64)
    y = dnp.from_numpy(h, chunks=8, placement="round_robin")
    out = dnp.zeros_like(y)
    before = _peer_asks(client)
    with dask.config.set({"dgvm.dispatch.peers": True}):
        want = a.copy()
        for i in range(20):  # each step's tasks read a row of the chunks others wrote the step before
            x[1:-1] = 0.5 * (x[:-2] + x[2:]) + i
            want[1:-1] = 0.5 * (want[:-2] + want[2:]) + i
        np.testing.assert_allclose(dnp.asnumpy(x), want, rtol=1e-12)
        assert _peer_asks(client) > before  # (else nothing here is tested)

        dgvm.launch(fails, y, out=out)  # fails on the worker of chunk 0
        z = out[::-1] + 1  # every task reads a chunk of another worker
        with pytest.raises(dgvm.KernelError, match="element 3 is bad"):
            dnp.asnumpy(z)
        np.testing.assert_array_equal(dnp.asnumpy(out[::-1] + 1), np.ones(32, np.int64))
    for a_ in (x, y, out):
        a_.free()


def test_a_homes_marks_of_copies_go_with_the_write_that_dropped_them_not_those_of_later_exports():
    """A home chunk exported whole may have copies elsewhere: a write to it waits for the
    GVAT. The GVAT's answer to such a write clears the marks of the exports made before
    its report (their copies were dropped, or are refused as stale), not those of exports
    since, whose copies may hold the new values; backups keep every write waiting."""
    from dgvm import backends
    from dgvm.worker.store import ChunkStore

    store = ChunkStore(backends.create("cpu", 1 << 20, None), "tcp://here")
    try:
        assert not store.may_have_copies(5, [0, 1, 2])
        store.shared(5, [0, 1])
        upto = store.exports  # (a write's report is made now)
        store.shared(5, [1])  # an export after it
        assert store.may_have_copies(5, [0]) and store.may_have_copies(5, [1])
        store.copies_dropped(5, [0, 1, 2], upto)
        assert not store.may_have_copies(5, [0]) and store.may_have_copies(5, [1])
        store.copies_dropped(5, [1], store.exports)
        assert not store.may_have_copies(5, [0, 1, 2])
    finally:
        store.close()


_gates: dict = {}


def _gated(name, indices, after):
    if not _gates[name].wait(60):
        raise TimeoutError(f"{name} was never let through")
    if name.startswith("fail"):
        raise ValueError(f"{name} fails")
    return name


def test_a_task_behind_one_of_its_worker_waiting_on_the_caller_goes_right_after_it(case):
    """A task that follows a task of its own worker which waits on the caller (for a task
    of another worker to end) is sent right after that one, on the same connection, to
    be ordered by its worker: not only once that one ended."""
    import threading
    import time
    import uuid

    from dgvm.client.session import session_of
    from dgvm.protocol.messages import TASK_PREFIX

    if case.backend != "cpu":
        pytest.skip("the gates are threading.Events of this process: in-process workers only")
    case.needs_workers(2, "a task of another worker to wait for")
    plane = session_of(case.client).part(direct.DirectPlane)
    w0, w1 = sorted(w.address for w in dgvm.workers())[:2]
    _gates.update({name: threading.Event() for name in ("other", "first", "next")})
    _gates["next"].set()

    def submit(name, worker, deps):
        key = f"{TASK_PREFIX}gated-{name}-{uuid.uuid4().hex[:8]}"
        task, = plane.submit(_gated, (name,), {worker: []}, [deps], [key], "", [])
        return task

    with dask.config.set({"dgvm.dispatch.peers": False}):  # (the caller orders across workers)
        other = submit("other", w1, [])
        first = submit("first", w0, [other])  # waits on the caller for `other` to end
        follower = submit("next", w0, [first])
        chain = [follower]
        for _ in range(400):  # (a long chain behind it is sent step by step, not in one nest of calls)
            chain.append(submit("next", w0, [chain[-1]]))
    try:
        time.sleep(0.2)
        assert first.channel is None and follower.channel is None  # both wait on the caller
        _gates["other"].set()
        deadline = time.monotonic() + 30
        while follower.channel is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert follower.channel is not None and first.channel is follower.channel
        assert not first.done()  # (`first` holds its worker's thread until let through)
    finally:
        for gate in _gates.values():
            gate.set()
    assert [t.result(60) for t in (other, first, follower)] == ["other", "first", "next"]
    assert [t.result(60) for t in chain] == ["next"] * len(chain)
    _gates.clear()


def _hold_next_job(dask_worker, gate):
    """Make the next job this worker's task threads take (a task of either plane) wait
    until ``_gates[gate]`` is set (once)."""
    pool = dask_worker.executors["default"]

    def submit(fn, *args, **kwargs):
        del pool.submit  # (once: the class's method again)

        def late(*a, **k):
            if not _gates[gate].wait(60):
                raise TimeoutError(f"{gate} was never let through")
            return fn(*a, **k)

        return type(pool).submit(pool, late, *args, **kwargs)

    pool.submit = submit


def _write_waiting_on_the_caller(case):
    """(h, x, z): x of two row chunks on two workers, ``z = x[::-1] + 0`` held on chunk
    0's worker for a second, and ``x += 1`` sent, whose task on chunk 1's worker follows
    z's task there (z is not aligned: it may read any chunk of x), so waits on the caller."""
    import threading

    if case.backend != "cpu":
        pytest.skip("holds an in-process worker's thread")
    case.needs_workers(2, "chunks on two workers")
    h = np.arange(16.0 * 4).reshape(16, 4)
    x = dnp.from_numpy(h, chunks=(8, 4), placement="round_robin")
    home0, home1 = x.alloc.homes()[:2]
    assert home0 != home1
    gate = _gates["held-a-second"] = threading.Event()
    case.client.run(_hold_next_job, gate="held-a-second", workers=[home0])
    threading.Timer(1.0, gate.set).start()
    z = (x[::-1] + 0).persist()
    x += 1
    return h, x, z


def test_a_write_of_some_chunks_leaves_the_earlier_writers_of_the_others_to_be_followed(case):
    """``x += 1`` writes every chunk, ``x[:8] = -1`` then only chunk 0: a later reader of
    chunk 1 follows the ``x += 1`` task that wrote it, though that task still waited on
    the caller (for a slow reader on another worker) when the reader was sent."""
    h, x, z = _write_waiting_on_the_caller(case)
    x[:8] = -1.0  # chunk 0 only
    w = (x * 2).persist()  # aligned: chunk 1's task must follow `x += 1`'s there
    want = h + 1
    want[:8] = -1.0
    np.testing.assert_array_equal(dnp.asnumpy(w), want * 2)
    np.testing.assert_array_equal(dnp.asnumpy(z), h[::-1])
    for a in (x, z, w):
        a.free()


def test_a_reductions_partial_follows_the_writer_of_its_own_chunk_waiting_on_the_caller(case):
    """A reduction's partial on a worker reads only that worker's chunks: it follows their
    writer there (not the writers of other chunks), even one that still waits on the
    caller when the reduction is sent."""
    h, x, z = _write_waiting_on_the_caller(case)
    assert float(x.sum()) == (h + 1).sum()
    np.testing.assert_array_equal(dnp.asnumpy(z), h[::-1])
    for a in (x, z):
        a.free()


def test_a_long_chain_behind_a_task_whose_dependency_failed_fails_whole(case):
    """400 tasks of one worker, each behind the last, behind one that waits on the caller
    for another worker's task: that task fails, and every task of the chain fails with
    its error (each in a loop step of its own, not one inside the other's end)."""
    import threading
    import uuid

    from dgvm.client.session import session_of
    from dgvm.protocol.messages import TASK_PREFIX

    if case.backend != "cpu":
        pytest.skip("the gates are threading.Events of this process: in-process workers only")
    case.needs_workers(2, "a task of another worker to wait for")
    plane = session_of(case.client).part(direct.DirectPlane)
    w0, w1 = sorted(w.address for w in dgvm.workers())[:2]
    _gates.update({"fail-first": threading.Event(), "next": threading.Event()})
    _gates["next"].set()

    def submit(name, worker, deps):
        key = f"{TASK_PREFIX}gated-{name}-{uuid.uuid4().hex[:8]}"
        task, = plane.submit(_gated, (name,), {worker: []}, [deps], [key], "", [])
        return task

    with dask.config.set({"dgvm.dispatch.peers": False}):
        failing = submit("fail-first", w1, [])
        chain = [submit("next", w0, [failing])]
        for _ in range(400):
            chain.append(submit("next", w0, [chain[-1]]))
    _gates["fail-first"].set()
    try:
        for t in [failing, *chain]:
            assert isinstance(t.exception(60), ValueError), t
    finally:
        for gate in _gates.values():
            gate.set()
        _gates.clear()


@pytest.mark.parametrize("then", ["write", "read"])
@pytest.mark.parametrize("plane", ["direct", "tasks"])
def test_a_task_that_fails_early_stands_for_the_tasks_it_follows_until_they_end(case, plane, then):
    """``y += a`` fails (the launch that wrote ``a``, on another worker, failed) while the
    tasks it follows on its worker still wait there: ``y += 1``, held, and ``z = y * 2``
    behind it. The failed task ends at once; once its error was raised, a later write of
    ``y`` still follows both (``z`` is ``(y + 1) * 2``, not made of the later write's
    values), and a read of ``y`` waits for ``y += 1``."""
    import threading

    if case.backend != "cpu":
        pytest.skip("holds an in-process worker's thread")
    case.needs_workers(2, "the failing launch on another worker")
    h = np.arange(16.0 * 4).reshape(16, 4)
    _gates["held"] = threading.Event()
    try:
        with dask.config.set({"dgvm.dispatch.plane": plane}):
            y = dnp.from_numpy(h, chunks=(16, 4))
            home = y.alloc.homes()[0]
            other = next(w.address for w in dgvm.workers() if w.address != home)
            src = dnp.from_numpy(np.arange(4.0), chunks=(4,))
            a = dnp.empty((4,), chunks=(4,))
            for arr in (src, a):
                if arr.alloc.homes()[0] != other:
                    arr.migrate(0, other)
            case.client.run(_hold_next_job, gate="held", workers=[home])
            y += 1  # held
            z = (y * 2).persist()  # behind it, on its worker
            held = [*y.pending.writes, *z.pending.writes]
            dgvm.launch(fails, src, out=a)  # fails on the other worker
            y += a  # follows both, and the failed launch: fails at once
            with pytest.raises(Exception, match="element 3 is bad"):
                y.wait()
            assert not any(f.done() for f in held)
            assert set(held) <= set(y.pending.writers())  # (through the failed task)
            if then == "write":
                y[...] = -5.0  # follows what the failed task followed
                _gates["held"].set()
                want = np.full_like(h, -5.0)
            else:  # the read waits for the held write: let it through a little later
                threading.Timer(0.3, _gates["held"].set).start()
                want = h + 1
            np.testing.assert_array_equal(dnp.asnumpy(y), want)
            np.testing.assert_array_equal(dnp.asnumpy(z), (h + 1) * 2)
            for arr in (y, z, src, a):
                arr.free()
    finally:
        _gates.pop("held").set()


def _unpicklable(xp, chunk, index):
    import threading

    return threading.Lock()  # (neither pickle nor cloudpickle takes a lock)


def _large_unpicklable(xp, chunk, index):
    import threading

    return np.zeros(1 << 16), threading.Lock()  # (over INLINE_RESULT: serialized as Dask does)


def test_results_of_every_size_come_back_whole_and_an_unpicklable_one_fails_the_task(case):
    """A task's result: small ones pickled on the worker's thread inside the answer, one
    over ``INLINE_RESULT`` serialized as Dask does, plain values (floats, ints) as they
    are; each equals NumPy's."""
    from dgvm.protocol import task_results

    rows = task_results.INLINE_RESULT // 8 + 4096  # one chunk's partial is over the inline size
    a = np.random.default_rng(5).standard_normal((2 * rows, 3))
    x = dnp.from_numpy(a, chunks=(rows, 3), placement="round_robin")
    assert len(set(x.alloc.homes())) == min(2, len(dgvm.workers()))  # (one GPU: one worker)
    np.testing.assert_allclose(dnp.asnumpy(x.sum(axis=1)), a.sum(axis=1), rtol=1e-12)  # Dask's frames
    np.testing.assert_allclose(dnp.asnumpy(x.mean(axis=0)), a.mean(axis=0), rtol=1e-12)  # inline ones
    assert float(x.sum()) == pytest.approx(a.sum(), rel=1e-12)
    ints = map_chunks(x.alloc, lambda xp, c, i: int(i) * (1 << 40))
    assert sorted(ints) == [0, 1 << 40]
    big = map_chunks(x.alloc, lambda xp, c, i: 1 << 70)  # past msgpack's ints: pickled
    assert big == [1 << 70, 1 << 70]
    with pytest.raises(Exception, match="pickle|lock"):
        map_chunks(x.alloc, _unpicklable)
    with pytest.raises(Exception, match="serialize|lock"):  # the task fails, not its connection
        map_chunks(x.alloc, _large_unpicklable)
    np.testing.assert_allclose(dnp.asnumpy(x * 2), a * 2)  # the next operation works


def test_a_result_is_unpickled_once_by_the_thread_that_asks():
    from dgvm.protocol import task_results

    value = {(0, 1): np.arange(5.0), (1, 0): (np.ones(2), "x")}
    for v in (None, True, 1.5, 7, -(1 << 63), (1 << 64) - 1):
        assert task_results.encode(v) == {"result": v}
    fields = task_results.encode(value)
    assert set(fields) == {"pickled"} and all(isinstance(p, bytes) for p in fields["pickled"])
    task = direct.DirectTask("k", "w", None, [])
    task._end("finished", task_results.Pickled(fields["pickled"]))
    got = task.result()
    assert got.keys() == value.keys() and task.result() is got  # (kept once unpickled)
    np.testing.assert_array_equal(got[(0, 1)], value[(0, 1)])
    got[(0, 1)][0] = 9.0  # the caller's to change
    large = task_results.encode(np.zeros(task_results.INLINE_RESULT // 8 + 1))
    assert set(large) == {"result"}  # as Dask serializes it
    from distributed.protocol import dumps, loads

    with dask.config.set({"distributed.comm.shard": "4KiB"}):  # frames split as the comm would
        value = (np.arange(20000.0), {"k": np.ones(3)})
        frames = dumps({"result": task_results.encode(value)["result"]})
    assert len(frames) > 10
    got = loads(frames)["result"]
    np.testing.assert_array_equal(got[0], value[0])
    np.testing.assert_array_equal(got[1]["k"], value[1]["k"])


def test_a_wait_for_an_operations_tasks_ends_when_all_ended_or_one_failed():
    import threading
    import time

    def waiting(tasks):
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("running", direct.wait_first_failure(tasks)),
                             daemon=True)
        t.start()
        return t, out

    tasks = [direct.DirectTask(f"k{i}", "w", None, []) for i in range(3)]
    t, out = waiting(tasks)
    tasks[0]._end("finished", 1)
    tasks[1]._end("finished", 2)
    time.sleep(0.05)
    assert t.is_alive()  # one still runs
    tasks[2]._end("finished", 3)
    t.join(5)
    assert not t.is_alive() and out["running"] == []
    tasks = [direct.DirectTask(f"f{i}", "w", None, []) for i in range(3)]
    t, out = waiting(tasks)
    tasks[1]._fail(ValueError("no"))
    t.join(5)
    assert not t.is_alive() and out["running"] == [tasks[0], tasks[2]]
    assert not [w for w in direct._waiters.values() if any(t in tasks for t in w[0])]  # (none left)


def test_a_task_that_ends_while_its_waiter_looks_still_wakes_it(monkeypatch):
    """The waiter registers before it looks at its tasks: a task ending on the loop's
    thread between the look and the wait finds it (a lost wake-up would hang here)."""
    import threading

    tasks = [direct.DirectTask(f"r{i}", "w", None, []) for i in range(2)]
    tasks[0]._end("finished", 0)
    look = direct._over
    ended = threading.Thread(target=lambda: tasks[1]._end("finished", 1))

    def racing(ts):
        seen = look(ts)
        if not ended.is_alive() and tasks[1].status == "pending":
            ended.start()  # the last task ends right after the look...
            ended.join(0.2)  # ...and, the waiter registered, waits for the lock it holds
        return seen

    monkeypatch.setattr(direct, "_over", racing)
    out = {}
    waiter = threading.Thread(target=lambda: out.setdefault("running", direct.wait_first_failure(tasks)),
                              daemon=True)  # (a regression leaves no thread behind)
    waiter.start()
    waiter.join(5)
    assert not waiter.is_alive() and out["running"] == []
    ended.join(5)
    assert not [w for w in direct._waiters.values() if any(t in tasks for t in w[0])]  # (none left)


def test_a_connection_a_worker_stops_reading_is_closed_and_its_tasks_end(case, monkeypatch):
    """A worker stops reading a client's connection for another reason than its closing
    (here: a task it cannot start): it closes the connection, so the tasks sent on it are
    stranded and end (the GVAT says the worker is still there: ``ConnectionBroke``),
    instead of waiting for answers that never come. The next operation works."""
    import threading

    from dgvm.protocol import messages
    from dgvm.protocol.errors import ConnectionBroke
    from dgvm.scheduler import departures

    case.needs_workers(2, "a worker that stops reading while another serves")
    if case.backend != "cpu":
        pytest.skip("the scheduler's bound is shortened in this process (an in-process cluster)")
    monkeypatch.setattr(departures, "STRANDED_WAIT", 1.0)  # (how long the GVAT waits for it to leave)
    h = np.arange(64, dtype=np.float64)
    x = dnp.from_numpy(h, chunks=16, placement="round_robin")
    (x + 1).wait()
    victim = x.alloc.homes()[1]

    def break_once(dask_worker):
        tasks = dask_worker.plugins[messages.STORE_PLUGIN].direct

        def start(msg, answer):
            del tasks._start  # (once)
            raise RuntimeError("a task that cannot be started")

        tasks._start = start

    case.client.run(break_once, workers=[victim])
    ended = []
    waiter = threading.Thread(target=lambda: ended.append(_outcome(lambda: (x * 2).wait())), daemon=True)
    waiter.start()
    waiter.join(60)
    assert ended, "the operation still waits for a connection its worker stopped reading"
    assert isinstance(ended[0], ConnectionBroke) and victim in str(ended[0]), repr(ended[0])
    y = x * 3
    y.wait()
    np.testing.assert_array_equal(dnp.asnumpy(y), h * 3)


def _outcome(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return e
    return None
