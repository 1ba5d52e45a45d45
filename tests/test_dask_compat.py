"""Each use dgvm makes of Dask's private API (dgvm.dask_compat) still does what dgvm needs:
these fail when a Dask release changes one."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
import threading
import time

import dask
import distributed
import pytest
from distributed import Client
from distributed.core import Status

from dgvm import dask_compat

ROOT = pathlib.Path(__file__).parent.parent

_release = threading.Event()


def _blocker():
    _release.wait(30)
    return "released"


def _double(x):
    return 2 * x


def _fails():
    raise ValueError("on purpose")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture
def client(cluster):
    with Client(cluster, set_as_default=False) as client:
        yield client


def test_a_client_closes_the_cluster_it_was_given():
    cluster = distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None)
    client = Client(cluster, set_as_default=False)
    dask_compat.close_cluster_with_client(client)
    client.close()
    assert cluster.status == Status.closed


def test_gather_skipping_errors_on_the_event_loop(client):
    futures = [client.submit(_double, 4, key="compat-ok"), client.submit(_fails, key="compat-fails")]
    assert client.sync(dask_compat.gather_skipping_errors, client, futures) == [8]


def test_prefix_durations_and_ready_tasks(client):
    # Dask times a prefix once tasks of it ran.
    client.gather([client.submit(time.sleep, 0.02, key=f"compatprobe-{i}", pure=False) for i in range(3)])
    timed = client.run_on_scheduler(lambda dask_scheduler: dask_compat.prefix_duration(dask_scheduler, "compatprobe"))
    assert timed is not None and timed > 0.005
    unknown = client.run_on_scheduler(lambda dask_scheduler: dask_compat.prefix_duration(dask_scheduler, "compatnever"))
    assert unknown is None

    # A task ready behind a running one (one thread) is in the worker's ready queue, and
    # counted per prefix on the scheduler's worker state.
    _release.clear()
    blocker = client.submit(_blocker, key="compatblock-1")
    waiting = client.submit(_double, 5, key="compatready-1")
    try:
        deadline = time.monotonic() + 10
        while True:
            keys = next(iter(client.run(lambda dask_worker: list(dask_compat.ready_task_keys(dask_worker))).values()))
            if "compatready-1" in keys or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert "compatready-1" in keys and "compatblock-1" not in keys
        queued = client.run_on_scheduler(
            lambda dask_scheduler: [dict(dask_compat.queued_prefixes(ws)) for ws in dask_scheduler.workers.values()])
        assert queued[0].get("compatready") == 1 and queued[0].get("compatblock") == 1
    finally:
        _release.set()
    assert blocker.result() == "released" and waiting.result() == 10


def test_a_child_process_inherits_the_dask_configuration():
    with dask.config.set({"dgvm-compat-probe": {"value": 3}}):
        env = dask_compat.inherited_config_env()
    assert dask.config.collect_env(env)["dgvm-compat-probe"] == {"value": 3}


class _Hooked(dask_compat.SpecClusterHooks, distributed.LocalCluster):
    def __init__(self, **kwargs):
        self.calls = []
        super().__init__(**kwargs)

    async def starting(self):
        self.calls.append("starting")

    async def correcting_state(self):
        self.calls.append("correcting_state")

    async def closing(self):
        self.calls.append(("closing", self.status == Status.running))


def test_spec_cluster_steps_run_the_hooks():
    cluster = _Hooked(n_workers=0, processes=False, dashboard_address=None)
    try:
        assert cluster.calls[0] == "starting" and cluster.status == Status.running
        cluster.worker_spec[0] = cluster.new_spec
        cluster.start_workers_now()
        assert len(cluster.workers) == 1 and "correcting_state" in cluster.calls
    finally:
        cluster.sync(cluster.close_now)
    assert ("closing", True) in cluster.calls and cluster.status == Status.closed


class _KeepsFirst(dask_compat.SpecClusterHooks, distributed.LocalCluster):
    def keeps_lost_worker(self, name):
        return name == 0


def test_a_kept_lost_worker_is_not_closed_once_the_lost_worker_timeout_passed():
    cluster = _KeepsFirst(n_workers=2, processes=False, dashboard_address=None)
    try:
        kept, dropped = cluster.workers[0], cluster.workers[1]
        with dask.config.set({"distributed.deploy.lost-worker-timeout": "1ms"}):
            for w in (kept, dropped):  # left the scheduler; in this order, so 0's timer is first
                cluster.sync(w.close)
                deadline = time.monotonic() + 30
                while w.address in cluster.scheduler_info["workers"]:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
            deadline = time.monotonic() + 30
            while 1 in cluster.workers:  # Dask's close of a lost worker
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert cluster.workers.get(0) is kept
    finally:
        cluster.close()


def test_when_main_thread_ends_runs_while_thread_pools_still_take_work(tmp_path):
    script = tmp_path / "ends.py"
    script.write_text(
        "import concurrent.futures\n"
        "from dgvm import dask_compat\n"
        "pool = concurrent.futures.ThreadPoolExecutor(1)\n"
        "def last_words():\n"
        "    print('pool answered', pool.submit(lambda: 6 * 7).result(), flush=True)\n"
        "dask_compat.when_main_thread_ends(last_words)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    # At atexit time the pool would refuse ("cannot schedule new futures after
    # interpreter shutdown").
    assert out.returncode == 0 and "pool answered 42" in out.stdout, out.stderr


def _wait_stranded(client, key: str) -> None:
    """Until task ``key`` waits in no-worker for a worker that is not there (10 s at most)."""
    deadline = time.monotonic() + 10
    while client.run_on_scheduler(lambda dask_scheduler: dask_compat.stranded_on(dask_scheduler, key)) is None:
        assert time.monotonic() < deadline, "the task never reached no-worker"
        time.sleep(0.02)


def test_a_task_stranded_on_a_worker_that_left_is_failed_with_the_error_given(client):
    gone = "tcp://127.0.0.1:9"  # no worker there: the task waits in no-worker
    with dask.annotate(compat_probe=[3, 4]):
        stranded = client.submit(_double, 1, key="compatstranded-1", workers=[gone], allow_other_workers=False)
    after = client.submit(_double, stranded, key="compatafter-1")
    _wait_stranded(client, "compatstranded-1")
    assert client.run_on_scheduler(
        lambda dask_scheduler: dask_compat.annotation(dask_scheduler, "compatstranded-1", "compat_probe")) == [3, 4]

    def fail(dask_scheduler):
        assert dask_compat.stranded_on(dask_scheduler, "compatstranded-1") == {gone}
        assert dask_compat.stranded_on(dask_scheduler, "compatafter-1") is None  # waiting, not stranded
        dask_compat.fail_waiting_task(dask_scheduler, "compatstranded-1", LookupError("its worker left"), "compat")

    client.run_on_scheduler(fail)
    for f in (stranded, after):
        with pytest.raises(LookupError, match="its worker left"):
            f.result(timeout=10)


def test_a_task_stranded_on_a_worker_that_left_runs_where_it_is_pinned_again(client):
    gone = "tcp://127.0.0.1:9"
    stranded = client.submit(_double, 21, key="compatrepin-1", workers=[gone], allow_other_workers=False)
    after = client.submit(_double, stranded, key="compatrepinafter-1")
    _wait_stranded(client, "compatrepin-1")
    worker, = client.scheduler_info()["workers"]
    assert not client.run_on_scheduler(
        lambda dask_scheduler: dask_compat.repin_stranded_task(dask_scheduler, "compatrepin-1", gone, "compat"))
    assert client.run_on_scheduler(
        lambda dask_scheduler: dask_compat.repin_stranded_task(dask_scheduler, "compatrepin-1", worker, "compat"))
    assert stranded.result(timeout=10) == 42 and after.result(timeout=10) == 84
    assert client.run_on_scheduler(
        lambda dask_scheduler: sorted(dask_scheduler.tasks["compatrepin-1"].worker_restrictions)) == [worker]


def _holders(dask_scheduler, keys) -> dict:
    return {k: sorted(ws.address for ws in dask_scheduler.tasks[k].who_has or ()) for k in keys}


def test_the_memory_manager_keeps_a_pinned_tasks_result_where_it_ran():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, Client(cluster, set_as_default=False) as client:
        ran, other = sorted(client.scheduler_info()["workers"])
        keys = ["compatpinned-1", "compatfree-1"]
        futures = [client.submit(_double, i, key=k, workers=[ran], allow_other_workers=False)
                   for i, k in enumerate(keys)]
        assert client.gather(futures) == [0, 2]
        ballast = client.scatter(bytes(1 << 20), workers=[ran])  # the fuller worker: Dask drops there

        def copy_elsewhere(dask_scheduler):
            amm = dask_scheduler.extensions["amm"]
            amm.stop()  # run once below, not every 2 s
            amm.measure = "managed"
            dask_compat.keep_pinned_results(dask_scheduler, "compatpinned-")
            assert {type(p).__name__ for p in amm.policies} == {"ReduceReplicasKeepingPinned"}
            # (as a task of the other worker that followed them would fetch them)
            dask_scheduler.request_acquire_replicas(other, keys, stimulus_id="compat-acquire")

        client.run_on_scheduler(copy_elsewhere)
        deadline = time.monotonic() + 10
        while any(len(h) < 2 for h in client.run_on_scheduler(_holders, keys=keys).values()):
            assert time.monotonic() < deadline, "the replicas never came"
            time.sleep(0.02)
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.extensions["amm"].run_once())
        while any(len(h) > 1 for h in client.run_on_scheduler(_holders, keys=keys).values()):
            assert time.monotonic() < deadline, "the extra replicas stayed"
            time.sleep(0.02)
        # The pinned task's result stays where it ran; any other's is dropped on the fuller worker.
        assert client.run_on_scheduler(_holders, keys=keys) == {"compatpinned-1": [ran], "compatfree-1": [other]}
        del ballast


class _Heard(dask_compat.SchedulerLossHooks):
    def __init__(self):
        self.heard = []

    def lost(self):
        self.heard.append("lost")

    def back(self):
        self.heard.append("back")


async def _until(predicate, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


def test_a_worker_outlives_a_broken_scheduler_stream_and_registers_again():
    async def main():
        async with distributed.Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as s, \
                distributed.Worker(s.address, nthreads=1) as w, \
                Client(s.address, asynchronous=True, set_as_default=False) as c:
            heard = _Heard()
            dask_compat.outlive_scheduler(w, 30, heard)
            kept = c.submit(_double, 3, key="compatkept-1")
            assert await kept == 6 and "compatkept-1" in w.data
            s.stream_comms[w.address].abort()  # as a scheduler that died: no "close" first
            await _until(lambda: heard.heard == ["lost", "back"] and w.address in s.workers)
            # Its Dask state went (Dask refuses to register a worker holding tasks), the
            # worker stayed; this scheduler, which lived on, computes the lost result again.
            assert w.status == Status.running and await kept == 6
            assert await c.submit(_double, 5, key="compatafter-2", workers=[w.address]) == 10

            # No scheduler at that address any more: the worker waits ``wait`` s, then closes.
            dask_compat.outlive_scheduler(w, 0.5, heard)
            s.stop()  # (no new connections)
            s.stream_comms[w.address].abort()
            await _until(lambda: w.status == Status.closed)
            assert heard.heard == ["lost", "back", "lost"]

    asyncio.run(main())
