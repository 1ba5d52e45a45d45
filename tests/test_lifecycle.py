"""Owners, disconnects, lost workers, and the plugins' wiring."""

import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from distributed import Client

import dgvm
import dgvm.array as dnp
from dgvm.client.left_workers import LeftWorkers
from dgvm.client.session import call_scheduler
from dgvm.protocol import messages

MiB = 2**20


def test_handlers_are_installed(case):
    have = case.client.run_on_scheduler(lambda dask_scheduler=None: set(dask_scheduler.handlers))
    assert messages.SCHEDULER_HANDLERS <= have
    for ops in case.client.run(lambda dask_worker: set(dask_worker.handlers)).values():
        assert messages.WORKER_HANDLERS <= ops


def test_workers_report_profiles(case):
    ws = dgvm.workers()
    assert len(ws) == len(case.capacities)
    assert sorted(w.capacity for w in ws) == sorted(
        # the cpu arena keeps its first 256 bytes unused so that offset 0 names nothing
        c - (256 if case.backend == "cpu" else 0) for c in case.capacities
    )
    for w in ws:
        assert w.backend == case.backend and w.bandwidth > 0 and w.status == "running"
        if case.backend == "cuda":
            assert w.sm_count > 0 and w.device.startswith("cuda:")
    if case.backend == "cuda":
        assert len({w.device for w in ws}) == len(ws)  # one GPU each


def test_other_clients_cannot_touch_an_allocation(case, monkeypatch):
    def waited(*args):  # a refusal is an answer, not a worker that went away
        raise AssertionError(f"a refused request waited for news that a worker left: {args}")

    monkeypatch.setattr(LeftWorkers, "wait_left", waited)
    with dgvm.malloc(2 * MiB, chunk_bytes=MiB) as buf:
        buf.write(0, b"mine")
        with Client(case.cluster.scheduler_address, set_as_default=False) as other:
            stolen = dgvm.GlobalBuffer(other, call_scheduler(messages.CHUNK_MAP, case.client, alloc_id=buf.alloc_id))
            with pytest.raises(dgvm.AccessDenied, match="belongs to"):
                stolen.read(0, 4)
            with pytest.raises(dgvm.AccessDenied):
                stolen.write(0, b"evil")
            with pytest.raises(dgvm.AccessDenied):
                stolen.free()
        assert bytes(buf.read(0, 4)) == b"mine"


def test_disconnect_frees_the_clients_allocations(case):
    before = sum(case.store_used().values())
    other = Client(case.cluster.scheduler_address, set_as_default=False)
    buf = dgvm.malloc(3 * MiB, chunk_bytes=MiB, client=other)
    assert sum(case.store_used().values()) == before + 3 * MiB
    other.close()
    wait_until(lambda: not dgvm.table())
    assert sum(case.store_used().values()) == before
    assert buf.alloc_id not in [a.alloc_id for a in dgvm.table()]


def wait_until(pred, timeout=10):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError
        time.sleep(0.05)


def test_not_connected_is_a_clear_error():
    import subprocess, sys

    code = "import dgvm\ntry:\n    dgvm.malloc(10)\nexcept dgvm.NotConnected as e:\n    print('OK', e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("OK") and "dgvm.connect()" in out.stdout


def test_worker_removal_marks_chunks_lost():
    with dgvm.LocalCluster(n_workers=2, backend="cpu", device_memory="32MiB",
                           processes=False, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        buf = dgvm.malloc(4 * MiB, chunk_bytes=MiB, placement="round_robin", client=client)
        victim = buf.chunks[1].worker
        client.sync(client.scheduler.retire_workers, workers=[victim], close_workers=True,
                    remove=True)
        wait_until(lambda: len(dgvm.workers(client=client)) == 1)
        info = dgvm.table(chunks=True, client=client)[0]
        assert [c.tier for c in info.chunks] == ["device", "lost", "device", "lost"]
        assert dgvm.translate(buf.vaddr + MiB + 3, client=client).tier == "lost"
        lost = [w for w in dgvm.workers(include_lost=True, client=client) if w.status == "lost"]
        assert [w.address for w in lost] == [victim]
        buf.refresh()
        with pytest.raises(dgvm.ChunkLost, match=victim):
            buf.read(MiB, 10)
        assert buf.read(0, 10).tolist() == [0] * 10  # chunks still home are readable
        buf.free()
        assert dgvm.table(client=client) == []


def test_chunks_live_in_device_memory(case):
    """cpu chunks are NumPy views of a shared-memory arena; cuda chunks are CuPy arrays in
    each worker's own GPU."""
    with dgvm.malloc(8 * MiB, chunk_bytes=MiB, placement="round_robin") as buf:
        buf.write(0, bytes(range(256)) * (8 * MiB // 256))

        def inspect(dask_worker, alloc_id=buf.alloc_id):
            store = dask_worker.extensions["dgvm"]
            out = []
            for i in store.holds(alloc_id):
                v = store.view(alloc_id, i)
                out.append((i, type(v).__module__.split(".")[0], int(v[:256].sum())))
            return out

        seen = case.client.run(inspect)
        kinds = {k for rows in seen.values() for _, k, _ in rows}
        assert kinds == ({"cupy"} if case.backend == "cuda" else {"numpy"})
        assert sorted(i for rows in seen.values() for i, _, _ in rows) == list(range(8))
        assert {s for rows in seen.values() for _, _, s in rows} == {sum(range(256))}
        assert all(rows for rows in seen.values())  # every worker holds some


def test_connect_attaches_to_a_plain_dask_cluster():
    """A cluster started without the dgvm preloads gets the plugins from dgvm.connect."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        with dgvm.connect(cluster.scheduler_address) as client:
            assert len(dgvm.workers(client=client)) == 2
            with dgvm.malloc(4 * MiB, chunk_bytes=MiB, client=client) as buf:
                buf.write(MiB - 1, b"ab")
                assert bytes(buf.read(MiB - 1, 2)) == b"ab"
                assert len({c.worker for c in buf.chunks}) == 2


def test_connect_without_address_starts_and_owns_a_local_cluster():
    client = dgvm.connect(n_workers=2, backend="cpu", device_memory="8MiB",
                          processes=False, dashboard_address=None)
    cluster = client.cluster
    try:
        assert isinstance(cluster, dgvm.LocalCluster)
        with dgvm.malloc(MiB, client=client) as buf:
            assert buf.nbytes == MiB
    finally:
        client.close()
    assert cluster.status.name == "closed"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_closing_a_cluster_frees_its_allocations_before_its_workers_go():
    # A script that ends with arrays alive: closing frees them first, so no worker is
    # reported leaving with chunks, and no free reaches a store that closed.
    cluster = dgvm.LocalCluster(n_workers=2, backend="cpu", device_memory="64MiB",
                                processes=False, dashboard_address=None)
    client = dgvm.connect(cluster)
    records = _Records()
    loggers = [logging.getLogger(name) for name in ("dgvm", "distributed")]
    try:
        x = dnp.ones((64, 64), chunks=(16, 16))
        y = x + 1
        assert float(y.sum()) == 2 * 64 * 64
        for lg in loggers:
            lg.addHandler(records)
        cluster.close()
        noise = [m for m in records.messages if "left holding" in m or "No handler" in m]
        assert not noise, noise
    finally:
        for lg in loggers:
            lg.removeHandler(records)
        client.close()
        cluster.close()


NUMPY_PROGRAM = """
import dgvm.array as np

x = np.ones(10)
print(float(x.sum()))
"""


def test_a_numpy_program_ends_without_errors(tmp_path):
    # Its cluster started by the first operation is closed at exit: the workers' stores
    # close while their processes are exiting, when no new thread can start.
    script = tmp_path / "program.py"
    script.write_text(NUMPY_PROGRAM)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DASK_DGVM__BACKEND": "cpu"})
    assert out.returncode == 0 and out.stdout.strip() == "10.0"
    assert "Traceback" not in out.stderr and "ERROR" not in out.stderr, out.stderr


GPU_PROGRAM = """
import os
import dgvm.array as np
from distributed import default_client

x = np.ones(10)
print(float(x.sum()))
print(default_client().run_on_scheduler(os.getpid) != os.getpid())
"""


@pytest.mark.gpu
def test_a_numpy_program_on_gpus_gets_a_scheduler_process(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(GPU_PROGRAM)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DASK_DGVM__BACKEND": "cuda"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["10.0", "True"]
    assert "Traceback" not in out.stderr and "ERROR" not in out.stderr, out.stderr


def test_a_free_after_the_allocation_went_is_answered_not_a_handler_failure(case):
    # As when a program's arrays are released while its cluster closes and frees them all.
    x = dnp.zeros(1000)
    alloc, client = x.alloc, case.client
    free = getattr(client.scheduler, messages.FREE)
    assert client.sync(free, alloc_id=alloc.alloc_id, owner=alloc.owner) == alloc.nbytes
    again = client.sync(free, alloc_id=alloc.alloc_id, owner=alloc.owner)
    assert again == messages.refusal(dgvm.InvalidAddress(f"allocation {alloc.alloc_id} was already freed"))
    with pytest.raises(dgvm.InvalidAddress, match="already freed"):
        alloc.free()
    # Every handler that looks an allocation up answers so, and the caller raises it.
    gone = client.sync(getattr(client.scheduler, messages.CHUNK_MAP), alloc_id=alloc.alloc_id)
    assert gone == messages.refusal(dgvm.InvalidAddress(f"allocation {alloc.alloc_id} was already freed"))
    for op, kw in ((messages.CHUNK_MAP, {}), (messages.TABLE, {}), (messages.MIGRATE, {"indices": [0], "worker": "x"})):
        with pytest.raises(dgvm.InvalidAddress, match="already freed"):
            call_scheduler(op, client, alloc_id=alloc.alloc_id, **kw)
    del x


def test_arrays_and_buffers_of_a_closed_cluster_say_so_in_one_way():
    cluster = dgvm.LocalCluster(n_workers=2, backend="cpu", processes=False, dashboard_address=None)
    client = dgvm.connect(cluster)
    x = dnp.from_numpy(np.arange(16.0).reshape(4, 4), chunks=(2, 2), client=client)
    buf = dgvm.malloc(1024, client=client)
    client.close()
    cluster.close()
    uses = {
        "asnumpy": lambda: dnp.asnumpy(x),
        "an operation": lambda: (x + 1).wait(),
        "a reduction": lambda: float(x.sum()),
        "a buffer read": lambda: buf.read(0, 4),
        "the GVAT table": lambda: dgvm.table(client=client),
        "a new array on it": lambda: dnp.ones(4, client=client),
    }
    for what, use in uses.items():
        with pytest.raises(dgvm.NotConnected, match="cluster of this array or buffer is closed"):
            use()
    x.free()  # its memory went with the cluster: nothing to give back, nothing raised
    buf.free()


def test_a_worker_without_a_store_gets_one_and_the_others_keep_theirs():
    """A worker joins a cluster whose workers were started with the preload, without it:
    the next connection installs a chunk store there, and the workers that have one keep
    it, chunks and all (Dask replaces a plugin registered again under the same name)."""
    import dask
    import distributed

    from dgvm.client.session import ensure_plugins

    with dgvm.LocalCluster(n_workers=2, backend="cpu", device_memory="32MiB", processes=False,
                           dashboard_address=None) as cluster, dgvm.connect(cluster) as client:
        buf = dgvm.malloc(4 * MiB, chunk_bytes=MiB, placement="round_robin", client=client)
        data = np.arange(4 * MiB, dtype=np.uint8)
        buf.write(0, data)

        async def plain_worker():
            return await distributed.Worker(cluster.scheduler_address, nthreads=1, dashboard=False)

        worker = client.sync(plain_worker)
        try:
            assert "dgvm" not in worker.extensions
            with dask.config.set({"dgvm.backend": "cpu", "dgvm.device-memory": "32MiB"}):  # (what it installs)
                ensure_plugins(client)
            assert "dgvm" in worker.extensions
            assert len(dgvm.workers(client=client)) == 3
            np.testing.assert_array_equal(buf.read(0, 4 * MiB), data)  # the stores kept their chunks
            buf.free()
        finally:
            client.sync(worker.close)
