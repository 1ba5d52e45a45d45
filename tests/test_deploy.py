"""Deployment as a user does it: a scheduler and workers started from the command line as
separate processes on loopback, then ``dgvm.connect(address)``, an allocation and a launch
through them; both with Dask's CLI and the dgvm preloads, and with ``dgvm scheduler`` /
``dgvm worker``. The processes are stopped (SIGTERM, as a user's Ctrl-C) whatever happens."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.deploy import commands as deploy
from dgvm.protocol.errors import DgvmError
from dgvm.client.session import call_workers
from dgvm.protocol import messages

from test_examples import load

MiB = 2**20
ARENA_RESERVE = 256  # a cpu arena keeps its first 256 bytes: offset 0 names no chunk
saxpy = load("saxpy").saxpy  # pickled by value: the workers need not import the tests
# Workers measure their device with a small copy (faster start); the scheduler's headroom
# checks that DASK_DGVM__ variables reach a scheduler started from the CLI.
WORKER_ENV = {"DASK_DGVM__PROFILE_BYTES": "2MiB", "NUMBA_NUM_THREADS": "2"}
SCHEDULER_ENV = {"DASK_DGVM__PLACEMENT__HEADROOM": "0.05"}


def cli(name: str) -> list[str]:
    """The console script ``name`` of this environment, else ``python -m name``."""
    script = os.path.join(os.path.dirname(sys.executable), name)
    return [script] if os.path.exists(script) else [sys.executable, "-m", name]


class Processes:
    """Processes started for one test, each logging to a file; ``stop`` ends them all."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.procs: dict[str, subprocess.Popen] = {}
        self.outcome: dict[str, str] = {}

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.dir / f"{name}.log", "w")
        p = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, start_new_session=True,
        )
        log.close()
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text()

    def logs(self) -> str:
        return "\n".join(f"----- {n} -----\n{self.log(n)[-4000:]}" for n in self.procs)

    def wait_exit(self, name: str, timeout: float) -> int:
        try:
            return self.procs[name].wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} still runs after {timeout} s\n{self.logs()}")

    def stop(self, timeout: float = 30, names=None) -> dict[str, str]:
        """SIGTERM one by one (``names``, or all), newest first (workers leave while their
        scheduler is still there); SIGKILL to the process group of one still there after
        ``timeout``. Answers how each one ended."""
        for name, p in reversed(self.procs.items()):
            if name in self.outcome or (names is not None and name not in names):
                continue
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
                self.outcome[name] = f"exit {p.returncode}"
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                self.outcome[name] = "killed"
        return self.outcome


@pytest.fixture
def procs(tmp_path):
    p = Processes(tmp_path)
    try:
        yield p
    finally:
        p.stop()
        print(p.logs())  # shown when the test failed


def scheduler_address(procs: Processes, name: str, path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs.procs[name].poll() is not None:
            pytest.fail(f"{name} exited with {procs.procs[name].returncode}\n{procs.logs()}")
        try:
            return json.loads(path.read_text())["address"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            time.sleep(0.1)
    pytest.fail(f"{name} wrote no scheduler file in {timeout} s\n{procs.logs()}")


def wait_for_stores(client, n: int, procs: Processes, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = dgvm.workers(client=client)
        if len(workers) >= n:
            return workers
        time.sleep(0.2)
    pytest.fail(f"{n} chunk stores did not report to the GVAT in {timeout} s\n{procs.logs()}")


def start_dask_scheduler(procs: Processes, tmp_path) -> str:
    """``dask scheduler --preload dgvm.scheduler`` on loopback; its address."""
    sched_file = tmp_path / "scheduler.json"
    procs.start("scheduler", [
        *cli("dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
        "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file),
        "--preload", "dgvm.scheduler",
    ], env=SCHEDULER_ENV)
    return scheduler_address(procs, "scheduler", sched_file)


def allocate_launch_free(client, capacities: list[int] | None, backend: str = "cpu") -> None:
    """What a user does on a fresh cluster, checked at every step against NumPy and the
    stores themselves (``capacities``: what each worker was told to offer, None: whole GPUs)."""
    workers = dgvm.workers(client=client)
    if capacities is not None:
        reserve = ARENA_RESERVE if backend == "cpu" else 0
        assert sorted(w.capacity for w in workers) == sorted(c - reserve for c in capacities)
    assert {w.address for w in workers} == set(client.scheduler_info()["workers"])
    assert {w.backend for w in workers} == {backend}
    headroom = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.extensions["dgvm"].gvat.headroom)
    assert headroom == 0.05

    hx = np.arange(20_000, dtype=np.float32)
    hy = np.linspace(0, 1, 20_000, dtype=np.float32)
    x = dnp.from_numpy(hx, chunks=2_500, client=client)
    y = dnp.from_numpy(hy, chunks=2_500, placement="round_robin", client=client)
    out = dnp.empty(20_000, dtype="float32", chunks=2_500, colocate=x, client=client)
    try:
        assert len(set(y.locations().values())) == len(workers)  # chunks on every worker
        dgvm.launch(saxpy, np.float32(2.5), x, y, out=out)
        np.testing.assert_allclose(dnp.asnumpy(out), np.float32(2.5) * hx + hy, rtol=1e-6)
        np.testing.assert_array_equal(dnp.asnumpy(y), hy)
    finally:
        for a in (x, y, out):
            a.free()
    assert dgvm.table(client=client) == []
    stores = call_workers(messages.STORE_INFO, {w.address: {} for w in workers}, client)
    for address, info in stores.items():
        assert (info["used"], info["chunks"], info["replicas"], info["allocations"]) == (0, 0, 0, 0), address


def assert_stopped_cleanly(procs: Processes) -> None:
    outcome = procs.stop()
    assert "killed" not in outcome.values(), f"{outcome}\n{procs.logs()}"


@pytest.mark.slow
def test_dask_cli_with_dgvm_preloads(procs, tmp_path):
    address = start_dask_scheduler(procs, tmp_path)
    memories = {"worker-a": 32 * MiB, "worker-b": 48 * MiB}
    for name, memory in memories.items():
        procs.start(name, [
            *cli("dask"), "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
            "--name", name, "--preload", "dgvm.worker",
            "--dgvm-backend", "cpu", "--dgvm-device-memory", f"{memory // MiB}MiB",
        ], env=WORKER_ENV)
    with dgvm.connect(address) as client:
        workers = wait_for_stores(client, 2, procs)
        names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
        assert {names[w.address]: w.capacity + ARENA_RESERVE for w in workers} == memories
        allocate_launch_free(client, list(memories.values()))

        # A worker whose dgvm options are wrong says why and goes away (Dask alone would
        # keep it running without a chunk store).
        procs.start("worker-bad", [
            *cli("dask"), "worker", address, "--host", "127.0.0.1", "--name", "worker-bad",
            "--preload", "dgvm.worker", "--dgvm-device-memory", "lots",
        ], env=WORKER_ENV)
        procs.wait_exit("worker-bad", 60)
        assert "dgvm.device-memory = 'lots' (from the preload option --dgvm-device-memory)" in procs.log("worker-bad")
        assert len(dgvm.workers(client=client)) == 2
    assert_stopped_cleanly(procs)


@pytest.mark.slow
def test_dgvm_scheduler_and_worker_commands(procs, tmp_path):
    sched_file = tmp_path / "scheduler.json"
    procs.start("scheduler", [
        *cli("dgvm"), "scheduler", "--port", "0", "--dashboard-address", "127.0.0.1:0",
        "--host", "127.0.0.1", "--scheduler-file", str(sched_file),
    ], env=SCHEDULER_ENV)
    address = scheduler_address(procs, "scheduler", sched_file)
    procs.start("workers", [
        *cli("dgvm"), "worker", address, "--backend", "cpu", "--device-memory", "40MiB",
        "--nworkers", "2", "--host", "127.0.0.1",
    ], env=WORKER_ENV)
    with dgvm.connect(address) as client:
        wait_for_stores(client, 2, procs)
        allocate_launch_free(client, [40 * MiB, 40 * MiB])
    assert "dgvm: running" in procs.log("workers") and "--preload dgvm.worker" in procs.log("workers")
    assert "/individual-dgvm" in procs.log("scheduler")
    assert_stopped_cleanly(procs)


def first_visible_gpu(client) -> list[str]:
    """The GPU each worker uses (its first visible one), sorted."""
    return sorted(client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]).values())


@pytest.mark.gpu
def test_dask_cuda_worker_and_dgvm_worker_on_gpus(procs, tmp_path):
    """On a GPU host: ``dask cuda worker --preload dgvm.worker`` (one worker per GPU, the
    whole GPU each), then ``dgvm worker`` with a device-memory limit, which runs dask-cuda
    underneath and hands the limit over as DASK_DGVM__DEVICE_MEMORY."""
    from dgvm.backends.cuda import gpu_count

    n = gpu_count()
    address = start_dask_scheduler(procs, tmp_path)
    procs.start("dask-cuda", [
        *cli("dask"), "cuda", "worker", address, "--host", "127.0.0.1", "--preload", "dgvm.worker",
    ], env=WORKER_ENV)
    with dgvm.connect(address) as client:
        workers = wait_for_stores(client, n, procs, timeout=120)
        assert first_visible_gpu(client) == [str(i) for i in range(n)]  # one GPU each
        assert all(w.capacity > 2**30 for w in workers)  # whole GPUs
        allocate_launch_free(client, None, backend="cuda")
        assert procs.stop(names=["dask-cuda"])["dask-cuda"] != "killed"
        deadline = time.monotonic() + 60
        while dgvm.workers(client=client) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert dgvm.workers(client=client) == []

    procs.start("dgvm-worker", [
        *cli("dgvm"), "worker", address, "--device-memory", "1GiB", "--host", "127.0.0.1",
    ], env=WORKER_ENV)
    with dgvm.connect(address) as client:
        wait_for_stores(client, n, procs, timeout=120)
        assert first_visible_gpu(client) == [str(i) for i in range(n)]
        allocate_launch_free(client, [2**30] * n, backend="cuda")
    log = procs.log("dgvm-worker")
    assert "DASK_DGVM__DEVICE_MEMORY=1GiB" in log and "-m dask cuda worker" in log
    assert_stopped_cleanly(procs)


@pytest.mark.gpu
def test_local_cluster_on_gpus_is_local_cuda_cluster():
    from dask_cuda import LocalCUDACluster

    from dgvm.backends.cuda import gpu_count

    n = gpu_count()
    with dgvm.LocalCluster(dashboard_address=None, device_memory="1GiB") as cluster, \
            dgvm.connect(cluster) as client:
        assert isinstance(cluster, LocalCUDACluster) and isinstance(cluster, dgvm.LocalCluster)
        assert repr(cluster).startswith("<dgvm.LocalCluster backend=cuda")
        assert first_visible_gpu(client) == [str(i) for i in range(n)]
        workers = dgvm.workers(client=client)
        assert [w.capacity for w in workers] == [2**30] * n and {w.backend for w in workers} == {"cuda"}
        x = dnp.arange(4_000_000, dtype="float64", chunks=500_000)
        assert float((2 * x).sum()) == 2 * float(np.arange(4_000_000, dtype="float64").sum())
        assert len(set(x.locations().values())) == n


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_local_cluster_with_its_scheduler_in_a_process_of_its_own(backend):
    import dask

    from dgvm.backends.cuda import gpu_count

    if backend == "cuda" and gpu_count() < 2:
        pytest.skip(f"needs 2 GPUs (one worker each); {gpu_count()} visible")

    # The scheduler process takes this process's config, as the workers do.
    with dask.config.set({"dgvm.placement.headroom": 0.25}), \
            dgvm.LocalCluster(n_workers=2, backend=backend, device_memory="256MiB",
                              scheduler_process=True, dashboard_address=None) as cluster, \
            dgvm.connect(cluster) as client:
        pid = client.run_on_scheduler(os.getpid)
        assert pid != os.getpid()
        assert client.run_on_scheduler(lambda: dask.config.get("dgvm.placement.headroom")) == 0.25
        # Its start-up objects are out of every collection, with Dask's scheduler thresholds;
        # so are the worker processes' (dgvm.gc_pauses).
        frozen, threshold = client.run_on_scheduler(lambda: (gc.get_freeze_count(), gc.get_threshold()))
        assert frozen > 10_000 and threshold[0] == 3 * gc.get_threshold()[0]
        assert all(n > 10_000 for n in client.run(gc.get_freeze_count).values())
        h = np.random.default_rng(0).random((300, 300))
        x = dnp.from_numpy(h, chunks=100, placement="round_robin")
        assert float((x + x.T).sum()) == pytest.approx((h + h.T).sum(), rel=1e-12)
        assert len(set(x.locations().values())) == 2
    # Closed with the cluster.
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)


def test_an_in_process_cluster_leaves_the_programs_collector_alone():
    before = gc.get_threshold()
    with dgvm.LocalCluster(n_workers=1, backend="cpu", device_memory="64MiB", processes=False,
                           dashboard_address=None) as cluster, dgvm.connect(cluster) as client:
        assert list(client.run(gc.get_freeze_count).values()) == [0]  # the worker is in this process
        assert gc.get_threshold() == before


ORPHAN = """
import os, sys, time
import dgvm
if __name__ == "__main__":
    cluster = dgvm.LocalCluster(n_workers=1, backend="cpu", device_memory="64MiB",
                                scheduler_process=True, dashboard_address=None)
    client = dgvm.connect(cluster)
    print(client.run_on_scheduler(os.getpid), flush=True)
    time.sleep(600)
"""


def test_a_scheduler_in_its_own_process_stops_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
    finally:
        parent.kill()  # SIGKILL: no cluster close runs
        parent.wait()
    with pytest.raises(ProcessLookupError):
        for _ in range(150):
            os.kill(pid, 0)
            time.sleep(0.1)


async def _async_cluster_with_its_scheduler_in_a_process_of_its_own():
    async with dgvm.LocalCluster(n_workers=2, backend="cpu", device_memory="64MiB", asynchronous=True,
                                 scheduler_process=True, dashboard_address=None) as cluster:
        from distributed import Client

        async with Client(cluster, asynchronous=True) as client:
            await client.wait_for_workers(2, timeout=60)
            return await client.run_on_scheduler(os.getpid)


def test_an_asynchronous_cluster_with_its_scheduler_in_a_process_of_its_own():
    import asyncio
    import logging

    class Errors(logging.Handler):
        def __init__(self):
            super().__init__(logging.ERROR)
            self.seen = []

        def emit(self, record):
            self.seen.append(record.getMessage())

    # Workers started before the scheduler had an address: an error on the event loop.
    errors, loggers = Errors(), [logging.getLogger(n) for n in ("", "tornado.application", "asyncio")]
    for log in loggers:
        log.addHandler(errors)
    try:
        assert asyncio.run(_async_cluster_with_its_scheduler_in_a_process_of_its_own()) != os.getpid()
    finally:
        for log in loggers:
            log.removeHandler(errors)
    assert errors.seen == []


def test_scheduler_process_refuses_options_it_cannot_pass():
    from dgvm.deploy.scheduler_process import spec

    with pytest.raises(ValueError, match="cannot pass the scheduler option services="):
        spec({"services": {("x", 0): object}, "port": 0})
    assert spec({"security": None, "port": 0, "preload": ["dgvm.scheduler"]})["options"] == {
        "options": {"preload": ["dgvm.scheduler", "dgvm.deploy.scheduler_process"], "port": 0}, "log_level": None}
    # Refused before anything starts (security=True: certificates made in this process).
    # (Threads of earlier tests may end meanwhile: the new ones are what counts.)
    threads = set(threading.enumerate())
    with pytest.raises(ValueError, match="cannot pass the scheduler option services="):
        dgvm.LocalCluster(backend="cpu", scheduler_process=True, scheduler_kwargs={"services": {("x", 0): object}})
    with pytest.raises(ValueError, match="cannot pass the scheduler option security=True"):
        dgvm.LocalCluster(backend="cpu", scheduler_process=True, security=True)
    assert not set(threading.enumerate()) - threads


def test_scheduler_with_a_bad_config_value_stops_and_says_why(procs):
    procs.start("scheduler", [
        *cli("dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
        "--preload", "dgvm.scheduler",
    ], env={"DASK_DGVM__PLACEMENT__HEADROOM": "2"})
    procs.wait_exit("scheduler", 60)
    log = procs.log("scheduler")
    assert "dgvm.placement.headroom = 2 (from the environment variable DASK_DGVM__PLACEMENT__HEADROOM)" in log
    assert "Reason: dgvm-config-error" in log


def test_wrappers_check_config_before_starting_dask():
    out = subprocess.run(
        [*cli("dgvm"), "worker", "tcp://127.0.0.1:1", "--device-memory", "lots"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 1
    assert "dgvm.device-memory = 'lots' (from dgvm worker --device-memory)" in out.stderr
    out = subprocess.run(
        [*cli("dgvm"), "scheduler"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "DASK_DGVM__PLACEMENT__DEFAULT": "random"},
    )
    assert out.returncode == 1 and "one of balanced, packed, round_robin" in out.stderr


def test_worker_preload_leaves_other_preloads_arguments():
    """``dask cuda worker`` gives every preload one argument list and adds
    --create-cuda-context, meant for its own preload: dgvm's takes its options, ignores that."""
    import asyncio

    from distributed import Scheduler, Worker

    async def run():
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as s:
            argv = ["--dgvm-backend", "cpu", "--dgvm-device-memory", "8MiB", "--create-cuda-context"]
            async with Worker(s.address, nthreads=1, preload=["dgvm.worker"], preload_argv=argv) as w:
                return w.extensions["dgvm"].backend.capacity

    assert asyncio.run(run()) == 8 * MiB - ARENA_RESERVE


# -- the commands the wrappers build -------------------------------------------------------
def after(argv: list[str], *words: str) -> bool:
    """``words`` appear in ``argv`` one right after the other."""
    n = len(words)
    return any(argv[i:i + n] == list(words) for i in range(len(argv) - n + 1))


def test_scheduler_command_defaults_and_pass_through():
    c = deploy.scheduler_command(dask_args=["--host", "10.0.0.1"])
    assert c.argv[:4] == [sys.executable, "-m", "dask", "scheduler"]
    assert after(c.argv, "--preload", "dgvm.scheduler")
    assert after(c.argv, "--port", "8786") and after(c.argv, "--dashboard-address", ":8787")
    assert after(c.argv, "--host", "10.0.0.1")


def test_cpu_worker_command():
    c = deploy.worker_command(["tcp://h:8786", "--memory-limit", "4GiB"], backend="cpu",
                              device_memory="2GiB", nworkers=3)
    assert c.argv[:5] == [sys.executable, "-m", "dask", "worker", "tcp://h:8786"]  # address first
    assert after(c.argv, "--nworkers", "3") and after(c.argv, "--nthreads", "1")
    assert after(c.argv, "--memory-limit", "4GiB")
    # the preload's options come after --preload, as Dask hands them to the preload
    assert after(c.argv, "--preload", "dgvm.worker", "--dgvm-backend", "cpu", "--dgvm-device-memory", "2GiB")


def test_gpu_host_gets_one_dask_cuda_worker_per_gpu(monkeypatch):
    monkeypatch.setattr(deploy, "has_dask_cuda", lambda: True)
    c = deploy.worker_command(["tcp://h:8786"], gpus=4)
    assert c.argv[:6] == [sys.executable, "-m", "dask", "cuda", "worker", "tcp://h:8786"]
    # dask-cuda's own preload would reject --dgvm-* options: they go as DASK_DGVM__*
    assert c.argv[-2:] == ["--preload", "dgvm.worker"]
    assert c.env == {"DASK_DGVM__BACKEND": "cuda"}
    c = deploy.worker_command(["tcp://h:8786"], device_memory="8GiB", gpus=4)
    assert c.env == {"DASK_DGVM__BACKEND": "cuda", "DASK_DGVM__DEVICE_MEMORY": "8GiB"}
    assert "--nworkers" not in c.argv
    with pytest.raises(DgvmError, match="CUDA_VISIBLE_DEVICES"):
        deploy.worker_command(["tcp://h:8786"], nworkers=2, gpus=4)


def test_gpu_host_without_dask_cuda(monkeypatch):
    monkeypatch.setattr(deploy, "has_dask_cuda", lambda: False)
    c = deploy.worker_command(["tcp://h:8786"], gpus=2)  # auto: cpu workers, and a note why
    assert "worker" in c.argv and "cuda" not in c.argv[:5] and after(c.argv, "--dgvm-backend", "cpu")
    assert any("dask-cuda is not installed" in n for n in c.notes)
    with pytest.raises(DgvmError, match="dask-cuda"):
        deploy.worker_command(["tcp://h:8786"], backend="cuda", gpus=2)
    with pytest.raises(DgvmError, match="no CUDA GPU"):
        deploy.worker_command(["tcp://h:8786"], backend="cuda", gpus=0)


NUMBA_FIRST = """
import numba  # imported before the cluster, as a program using Numba or dgvm.kernel does
import dgvm

def pool_size():
    from numba.np.ufunc import parallel
    import os
    return os.environ.get("NUMBA_NUM_THREADS"), parallel.NUM_THREADS, numba.get_num_threads()

if __name__ == "__main__":
    with dgvm.LocalCluster(n_workers=2, backend="cpu", device_memory="64MiB",
                           dashboard_address=None) as cluster, cluster.get_client() as client:
        for size in client.run(pool_size).values():
            print(*size)
"""


def test_cpu_workers_launch_the_numba_threads_their_environment_names(tmp_path):
    # The workers import the main module, and so Numba, before their environment is set;
    # their thread pools must follow the environment (one core each here), not the count
    # Numba read at import.
    script = tmp_path / "numba_first.py"
    script.write_text(NUMBA_FIRST)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line.split() for line in out.stdout.splitlines() if line.strip()]
    wanted = str(max(1, (os.cpu_count() or 1) // 2))  # deploy.cpu_worker_env's share
    assert len(lines) == 2
    for env_threads, pool, used in lines:
        assert env_threads == wanted
        assert int(pool) == int(used) == int(wanted)
