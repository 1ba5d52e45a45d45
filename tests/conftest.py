"""Shared fixtures: one test body, two backends.

Every cluster test takes the ``dgvm_cluster`` fixture, which runs on ``cpu`` everywhere and
on ``cuda`` (marker ``gpu``) where a GPU is visible: ``pytest -m gpu`` on a GPU machine.
"""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass

import dask
import pytest

import dgvm
from dgvm.backends.cuda import gpu_count
from dgvm.client.session import call_scheduler
from dgvm.protocol import messages

MiB = 2**20

# Dask's statistical profiler samples every thread's frames from a thread of its own, and
# CPython 3.11 can crash doing that while another thread is building a frame (seen here: a
# segfault in distributed/profile.py during a full run, with the task threads in
# ``sync``). The tests read no profile: it is off for them and for the processes they start.
os.environ["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"] = "False"
dask.config.set({"distributed.worker.profile.enabled": False})


@dataclass
class ClusterCase:
    backend: str
    cluster: object
    client: object
    capacities: list[int]
    speeds: list[float]

    def needs_workers(self, n: int, why: str) -> None:
        """Skip the test where this case has fewer than ``n`` workers (a cuda case has one
        per visible GPU)."""
        if len(self.capacities) < n:
            pytest.skip(f"needs {n} workers ({why}); this {self.backend} case has {len(self.capacities)}")

    def store_used(self) -> dict[str, int]:
        """Bytes each worker's chunk store holds, asked of the stores themselves once the
        old homes of earlier moves released their copies (``dgvm.stats`` waits for them)."""
        dgvm.stats(client=self.client)
        return self.client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.used)

    def allocations(self) -> int:
        """How many allocations the GVAT holds for this case's client."""
        return len(dgvm.table(client=self.client))

    def store_chunks(self) -> dict[str, int]:
        return self.client.run(lambda dask_worker: dask_worker.extensions["dgvm"].metrics()["chunks"])


def _cpu_case():
    caps = [64 * MiB, 128 * MiB, 256 * MiB]
    speeds = [1.0, 2.0, 4.0]
    cluster = dgvm.LocalCluster(
        n_workers=3, backend="cpu", device_memory=caps, device_speed=speeds,
        processes=False, dashboard_address=None,
    )
    return cluster, caps, speeds


def _cuda_case():
    n = gpu_count()
    caps = [256 * MiB * (i + 1) for i in range(n)]
    speeds = [float(i + 1) for i in range(n)]
    cluster = dgvm.LocalCluster(
        n_workers=n, backend="cuda", device_memory=caps, device_speed=speeds,
        dashboard_address=None,
    )
    return cluster, caps, speeds


@pytest.fixture(
    scope="module",
    params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)],
)
def dgvm_cluster(request):
    if request.param == "cuda" and gpu_count() == 0:
        pytest.skip("no CUDA GPU visible")
    cluster, caps, speeds = (_cuda_case if request.param == "cuda" else _cpu_case)()
    client = dgvm.connect(cluster)
    # What is alive now (the modules, this cluster's servers and workers, the client) lives
    # as long as the module's tests: it is frozen out of their collections, as
    # ``dgvm.gc_pauses`` does in the processes dgvm starts. Every test's leak check (``case``)
    # runs a full collection, which then walks only what the tests made, not the ~200,000
    # objects of Dask and the imports. Thawed once the cluster is closed.
    gc.collect()
    gc.freeze()
    try:
        yield ClusterCase(request.param, cluster, client, caps, speeds)
    finally:
        try:
            client.close()
            cluster.close()
        finally:
            gc.unfreeze()


@pytest.fixture
def case(dgvm_cluster):
    """A cluster case that must be left as found: no allocation, no chunk in any store."""
    yield dgvm_cluster
    # DArrays free themselves when unreachable: let those releases reach the GVAT first.
    from dgvm.array._engine.lifecycle import drain_releases

    drain_releases()
    leftover = dgvm.table(client=dgvm_cluster.client)
    for a in leftover:
        call_scheduler(messages.FREE, dgvm_cluster.client, alloc_id=a.alloc_id)
    assert not leftover, f"test left allocations behind: {leftover}"
    assert set(dgvm_cluster.store_used().values()) == {0}
    # No allocation of the test is left and its garbage was just collected: what it leaves
    # alive (Dask's logs and caches) joins what ``dgvm_cluster`` froze, so that the next
    # test's collection walks only what that test makes. Thawed with the rest at the end.
    gc.freeze()


class TaskSizes:
    """The pickled sizes of the arguments of the tasks dgvm submits, and of the results
    blockwise reductions bring back, while ``recording``."""

    def __init__(self):
        self.on, self.args, self.results = False, [], []

    @contextlib.contextmanager
    def recording(self):
        self.on, self.args, self.results = True, [], []
        try:
            yield
        finally:
            self.on = False

    def check(self, limit: int) -> None:
        """Some task was submitted, and none carried, nor any result held, ``limit`` bytes."""
        assert self.args, "no task was submitted"
        name, biggest = max(self.args, key=lambda t: t[1])
        assert biggest < limit, f"task {name} carried {biggest} bytes"
        assert max(self.results, default=0) < limit, f"a result of {max(self.results)} bytes came back"


@pytest.fixture
def direct_tasks(monkeypatch):
    """The keys of the tasks the direct plane sends (``dgvm.client.direct``), in order."""
    from dgvm.client import direct

    keys: list = []
    real = direct.DirectPlane.submit

    def submit(self, *args, **kwargs):
        tasks = real(self, *args, **kwargs)
        keys.extend(t.key for t in tasks)
        return tasks

    monkeypatch.setattr(direct.DirectPlane, "submit", submit)
    return keys


@pytest.fixture
def task_sizes(monkeypatch):
    """A ``TaskSizes`` that spies on ``dispatch.submit`` and blockwise's ``gather``."""
    import cloudpickle

    from dgvm.array._engine import blockwise
    from dgvm.client import dispatch

    sizes = TaskSizes()
    real_submit, real_gather = dispatch.submit, dispatch.gather

    def submit(client, fn, args, homes, deps, name, **options):
        if sizes.on:
            sizes.args.append((name, len(cloudpickle.dumps(args))))
        return real_submit(client, fn, args, homes, deps, name, **options)

    def gather(client, futures, direct=False):
        out = real_gather(client, futures, direct=direct)
        if sizes.on:
            sizes.results.append(len(cloudpickle.dumps(out)))
        return out

    monkeypatch.setattr(dispatch, "submit", submit)
    monkeypatch.setattr(blockwise, "submit", submit)
    monkeypatch.setattr(blockwise, "gather", gather)
    return sizes


def pytest_collection_modifyitems(config, items):
    if gpu_count() == 0 and not os.environ.get("DGVM_TEST_GPU"):
        skip = pytest.mark.skip(reason="no CUDA GPU visible")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
