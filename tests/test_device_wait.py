"""A task with another dgvm task ready behind it returns without waiting for the device
(dgvm.backends.queued_work): the results are the same, a peer copying a chunk waits for the
work left running, and a fault found later names that work."""

from __future__ import annotations

import contextlib
import time
import types

import dask
import numpy as np
import pytest
from distributed import Event
from numba import cuda

import dgvm
import dgvm.array as dnp
from dgvm.backends.queued_work import QueuedWork
from dgvm.protocol.errors import KernelError
from dgvm.worker.access import ArraySpec
from dgvm.worker.tasks import finish_on_device, write_chunks


class _Event:
    def __init__(self):
        self.done = False

    def synchronize(self):
        self.done = True


def test_queued_work_forgets_only_what_it_waited_for():
    events = []
    q = QueuedWork(lambda: events.append(_Event()) or events[-1])
    assert q.done() and q.named() == []
    q.leave("a")
    q.leave("b")
    assert not q.done() and q.named() == ["a", "b"] and q.left_running == 2
    q.wait()  # the last event: later on the stream than the first
    assert events[1].done and q.done() and q.named() == []

    q.leave("c")

    def device_wait():
        q.leave("d")  # another thread's task leaves work during the wait: kept
    q.synchronized(device_wait)
    assert q.named() == ["c", "d"] and not q.done()


def test_a_wait_forgets_only_the_event_it_waited_for():
    """Another task leaves work right after wait() has taken its event: that work is
    still running and must stay recorded (an export would skip its wait otherwise)."""
    q = None

    class Racing(_Event):
        @property
        def synchronize(self):  # looked up once wait() holds its event
            if q.named() == ["a"]:
                q.leave("b")
            return super().synchronize

    q = QueuedWork(Racing)
    q.leave("a")
    q.wait()
    assert q.named()[-1] == "b" and not q.done()


def test_a_device_fault_names_the_work_left_running_before_it():
    q = QueuedWork(_Event)
    q.leave("kernel 'first' on chunks [0, 1] of allocation 7")

    def fault():
        raise RuntimeError("cudaErrorIllegalAddress")

    backend = types.SimpleNamespace(queued=q, synchronize=fault, one_stream=True, may_lose_context=False)
    worker = types.SimpleNamespace(address="tcp://w:1", state=types.SimpleNamespace(ready=[], constrained=[]))
    access = types.SimpleNamespace(store=types.SimpleNamespace(backend=backend), worker=worker)
    out = ArraySpec(9, "me", (4,), "<f8", ((2, 2),))
    with pytest.raises(KernelError) as e:
        finish_on_device(access, "kernel 'second'", out, [1])
    msg = str(e.value)
    assert "kernel 'second' failed on chunk 1" in msg and "cudaErrorIllegalAddress" in msg
    assert "queued before it without a wait: kernel 'first' on chunks [0, 1] of allocation 7" in msg


def test_a_failing_task_still_waits_for_the_work_left_before_it():
    # The task that failed was the one an earlier task left its work running for.
    q = QueuedWork(_Event)
    q.leave("kernel 'first' on chunks [0] of allocation 7")
    waits = []
    # As a Backend's synchronize: the device wait, then the work left running is forgotten.
    backend = types.SimpleNamespace(queued=q, synchronize=lambda: q.synchronized(lambda: waits.append(1)),
                                    one_stream=True, context_ended=False)
    store = types.SimpleNamespace(backend=backend, wait_writable=lambda alloc_id, k: None,
                                  is_home=lambda alloc_id, k: True, wrote=lambda alloc_id, k: None,
                                  done_writing={})
    access = types.SimpleNamespace(store=store, reads={}, output_chunk=contextlib.nullcontext)

    def per_chunk(k):
        raise ValueError("the task's own error")

    out = ArraySpec(9, "me", (4,), "<f8", ((2, 2),))
    with pytest.raises(ValueError, match="own error"):
        write_chunks(access, out, [0, 1], "operation X", per_chunk, kernel_errors=False)
    assert waits == [1] and q.done() and q.named() == []


def _left_running(client) -> int:
    return sum(w["left_running"] for w in dgvm.stats(client=client)["workers"].values())


@dgvm.kernel
def _spin(origin, x, a, iters, out):
    # v <- a v + (1 - a), ``iters`` times in the chunks past the first row of chunks and
    # once in those of the first: device work as long as we ask, on one worker only.
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        v = x[i, j]
        for _ in range(iters if origin[0] > 0 else 1):
            v = v * a + (1.0 - a)
        out[i, j] = v


def test_a_peer_copies_a_chunk_only_after_the_work_left_running_on_it(case):
    # x's two rows of chunks are on two workers, A and B. On cuda y's chunk on B takes
    # about half a second of device time and A's almost none: A's task reading y's chunk
    # on B starts long before B's device is done with it, and must copy it only after.
    n, iters = (2000, 800_000) if case.backend == "cuda" else (200, 2_000)
    h = np.random.default_rng(0).random((n, n))
    x = dnp.from_numpy(h, chunks=(n // 2, n), placement="round_robin")
    x.wait()
    b = x.locations()[(1, 0)]
    before = _left_running(case.client)
    for k in range(2):
        a = 1.0 - (k + 1) / (2 * iters)  # each round's y has other values than the last
        expect = 1.0 + (h - 1.0) * a ** np.where(np.arange(n) < n // 2, 1, iters)[:, None]
        # B's one thread sleeps while z's tasks and then y's arrive; Dask runs the last
        # submitted first, so y's task on B finds z's ready behind it and leaves its work
        # running.
        sleep = case.client.submit(time.sleep, 0.5, workers=[b], pure=False)
        zs = [(x + float(j)).persist() for j in range(2)]
        y = dnp.empty_like(x)
        dgvm.launch(_spin, x, a, iters, out=y, pass_origin=True)
        t = (x + y.T).persist()  # placed as x: A's chunk reads both of y's
        np.testing.assert_allclose(dnp.asnumpy(t), h + expect.T, rtol=1e-9)
        np.testing.assert_allclose(dnp.asnumpy(zs[-1]), h + 1.0, rtol=1e-12)
        sleep.result()
        del y, zs, t
    assert _left_running(case.client) > before


def _set_device_wait(client, value):
    def set_here():
        dask.config.set({"dgvm.dispatch.device-wait": value})
    client.run(set_here)


def test_every_task_waits_when_configured(case):
    h = np.random.default_rng(1).random((400, 400))
    x = dnp.from_numpy(h, chunks=100)
    _set_device_wait(case.client, "every")
    try:
        before = _left_running(case.client)
        for k in range(20):
            y = ((x * float(k)) + 1.0).persist()
        np.testing.assert_allclose(dnp.asnumpy(y), h * 19.0 + 1.0, rtol=1e-12)
        assert _left_running(case.client) == before
    finally:
        _set_device_wait(case.client, "last")


def test_a_chain_of_steps_leaves_each_steps_device_work_running_for_the_next(case):
    """Each step of a chain reads the one before (``x += 1``): the next step's task has
    arrived and waits only for this worker's running task, so that task leaves its device
    work running (the next one queues behind it on the stream and waits for the device);
    the values are NumPy's."""
    h = np.random.default_rng(2).random((64, 64))
    x = dnp.from_numpy(h, chunks=(64, 64))
    x.wait()
    home = x.alloc.homes()[0]
    before = _left_running(case.client)
    # The worker's one thread is held while the steps arrive: each waits behind the last.
    started, go = Event(), Event()
    held = case.client.submit(_hold, started, go, workers=[home], pure=False)
    assert started.wait(60)
    for _ in range(30):
        x += 1.0
    go.set()
    np.testing.assert_allclose(dnp.asnumpy(x), h + 30.0, rtol=1e-12)
    held.result()
    assert _left_running(case.client) - before >= 25


def _hold(started, go):
    started.set()
    go.wait(60)
