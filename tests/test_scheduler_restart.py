"""A scheduler that restarts: its process is killed (SIGKILL), a new one starts at the same
address, and the GVAT comes back from what the workers report (``dgvm.scheduler.rebuild``).

The scheduler (``dask scheduler --preload dgvm.scheduler``) and the workers (``dgvm worker
--nworkers N``: worker processes under nannies, cpu backend) are processes of their own on
loopback, as in ``test_deploy.py``. The program's client is the same throughout: Dask's
Client reconnects to the scheduler at the same address, with the same id, so it still owns
its allocations."""

from __future__ import annotations

import os
import re
import signal
import socket
import time

import dask
import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import drain_releases
from dgvm.client.session import call_workers
from dgvm.protocol import messages
from dgvm.protocol.errors import ChunkLost, DgvmError

from test_deploy import WORKER_ENV, Processes, cli, procs  # noqa: F401  (procs: a fixture)

pytestmark = pytest.mark.slow

MiB = 2**20
# The client's reconnection lasts Dask's connect timeout (dgvm.connect-timeout): longer
# than a scheduler takes to start on a loaded machine.
RECONNECT = "120s"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_scheduler(procs: Processes, name: str, port: int) -> str:
    procs.start(name, [
        *cli("dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
        "--dashboard-address", "127.0.0.1:0", "--preload", "dgvm.scheduler",
    ])
    return f"tcp://127.0.0.1:{port}"


def kill(procs: Processes, name: str) -> None:
    """SIGKILL, as a crash: the scheduler closes nothing."""
    p = procs.procs[name]
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    procs.outcome[name] = "killed on purpose"


def start_workers(procs: Processes, address: str, n: int, env: dict | None = None) -> None:
    procs.start("workers", [
        *cli("dgvm"), "worker", address, "--backend", "cpu", "--device-memory", "32MiB",
        "--nworkers", str(n), "--nthreads", "1", "--host", "127.0.0.1",
    ], env={**WORKER_ENV, **(env or {})})


def wait_for(what: str, check, procs: Processes, timeout: float = 120):
    """``check()``'s first true answer (errors while the scheduler is away count as none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer = check()
        except (OSError, DgvmError, TimeoutError):
            answer = None
        if answer:
            return answer
        time.sleep(0.25)
    pytest.fail(f"{what}: not within {timeout} s\n{procs.logs()}")


def store_use(client, addresses) -> dict:
    stores = call_workers(messages.STORE_INFO, {a: {} for a in addresses}, client)
    return {a: (m["used"], m["chunks"], m["replicas"], m["allocations"]) for a, m in stores.items()}


def rows(client) -> dict:
    """The GVAT's table, without what a restart may change (versions)."""
    out = {}
    for info in dgvm.table(client=client, chunks=True):
        chunks = tuple((c.index, c.vaddr, c.nbytes, c.worker, c.tier, tuple(sorted(c.backups)))
                       for c in info.chunks)
        out[info.alloc_id] = (info.owner, info.vaddr, info.nbytes, info.chunk_bytes, info.nchunks,
                              info.placement, info.dtype, info.shape, info.copies, chunks)
    return out


def restart_scheduler(procs: Processes, port: int, client, workers: int, name: str = "scheduler-2") -> None:
    kill(procs, "scheduler")
    start_scheduler(procs, name, port)
    wait_for("the workers registered with the new scheduler",
             lambda: len(dgvm.workers(client=client)) == workers and client.status == "running", procs)


def test_the_gvat_comes_back_from_the_workers(procs):
    port = free_port()
    address = start_scheduler(procs, "scheduler", port)
    start_workers(procs, address, 3)
    with dask.config.set({"dgvm.connect-timeout": RECONNECT}):
        client = dgvm.connect(address)
    with client:
        wait_for("3 chunk stores", lambda: len(dgvm.workers(client=client)) == 3, procs)
        workers = {w.address for w in dgvm.workers(client=client)}
        pids = client.run(os.getpid)
        hx = np.arange(30_000, dtype=np.float64).reshape(300, 100)
        hy = np.linspace(-1, 1, 12_000, dtype=np.float32)
        x = dnp.from_numpy(hx, chunks=(40, 60), client=client)  # uneven blocks
        y = dnp.from_numpy(hy, chunks=1_000, replicas=2, client=client)  # backups
        buf = dgvm.malloc(3 * MiB + 5, chunk_bytes=MiB, client=client)
        hb = np.random.default_rng(0).integers(0, 255, 3 * MiB + 5, dtype=np.uint8)
        buf.write(0, hb)
        before = rows(client)
        assert {c[3] for row in before.values() for c in row[-1]} == workers

        restart_scheduler(procs, port, client, 3)

        # The same worker processes, holding what they held; the same table.
        assert client.run(os.getpid) == pids
        assert rows(client) == before
        np.testing.assert_array_equal(dnp.asnumpy(x), hx)
        np.testing.assert_array_equal(dnp.asnumpy(y), hy)
        np.testing.assert_array_equal(buf.read(0, hb.size), hb)

        # Writes, operations and launches, as before the restart.
        x[10:50, 5:95] = -1.0
        hx[10:50, 5:95] = -1.0
        y[:3_000] = y[:3_000] * 2
        hy[:3_000] *= 2
        buf.write(MiB - 3, np.full(7, 9, np.uint8))
        hb[MiB - 3:MiB + 4] = 9
        np.testing.assert_array_equal(dnp.asnumpy(x), hx)
        np.testing.assert_array_equal(dnp.asnumpy(y), hy)
        np.testing.assert_array_equal(buf.read(0, hb.size), hb)
        np.testing.assert_allclose(float(dnp.sum(x * 2)), float(np.sum(hx * 2)))
        backups = {c.index: c.backups for c in dgvm.table(y.alloc.alloc_id, client=client, chunks=True)[0].chunks}
        assert all(len(b) == 1 for b in backups.values())  # every write reached the backups

        # New memory gets ids and addresses no allocation before the restart had.
        z = dnp.from_numpy(np.arange(5_000, dtype=np.int64), chunks=1_000, client=client)
        np.testing.assert_array_equal(dnp.asnumpy(z + x[0, 0]), np.arange(5_000) + hx[0, 0])
        assert z.alloc.alloc_id > max(before)
        new_vaddr = rows(client)[z.alloc.alloc_id][1]
        assert new_vaddr >= max(r[1] + r[2] for r in before.values())

        for a in (x, y, z, buf):
            a.free()
        drain_releases(client)  # (temporaries: ``y[:3_000] * 2``, ``x * 2``)
        assert dgvm.table(client=client) == []
        use = store_use(client, workers)
        assert all(u == (0, 0, 0, 0) for u in use.values()), use
        client.close()
    assert "killed" not in procs.stop().values()


def test_chunks_no_worker_reports_are_lost(procs):
    """A worker dies while the scheduler is away: the allocations it held chunks of (no
    copies) raise ChunkLost naming them; one kept with replicas=2 lives on; frees release
    every chunk that survived."""
    port = free_port()
    address = start_scheduler(procs, "scheduler", port)
    start_workers(procs, address, 3)
    with dask.config.set({"dgvm.connect-timeout": RECONNECT}):
        client = dgvm.connect(address)
    with client:
        wait_for("3 chunk stores", lambda: len(dgvm.workers(client=client)) == 3, procs)
        hx = np.arange(9_000, dtype=np.int32)
        x = dnp.from_numpy(hx, chunks=1_000, placement="round_robin", client=client)
        y = dnp.from_numpy(hx * 3, chunks=1_000, placement="round_robin", replicas=2, client=client)
        pids = client.run(os.getpid)
        victim = sorted(pids)[0]
        lost = [i for i, w in enumerate(x.alloc.homes()) if w == victim]

        kill(procs, "scheduler")
        os.kill(pids[victim], signal.SIGKILL)  # its nanny starts a new, empty worker
        start_scheduler(procs, "scheduler-2", port)
        wait_for("3 workers again", lambda: len(dgvm.workers(client=client)) == 3
                 and victim not in {w.address for w in dgvm.workers(client=client)}, procs)

        with pytest.raises(ChunkLost, match=re.escape(f"chunks {lost} of allocation {x.alloc.alloc_id}")):
            dnp.asnumpy(x)
        np.testing.assert_array_equal(dnp.asnumpy(y), hx * 3)
        y[:] = 7
        np.testing.assert_array_equal(dnp.asnumpy(y), np.full(9_000, 7, np.int32))
        x.free()
        y.free()
        drain_releases(client)
        assert dgvm.table(client=client) == []
        workers = [w.address for w in dgvm.workers(client=client)]
        use = store_use(client, workers)
        assert all(u == (0, 0, 0, 0) for u in use.values()), use
        client.close()


def test_workers_close_when_no_scheduler_comes_back(procs):
    port = free_port()
    address = start_scheduler(procs, "scheduler", port)
    start_workers(procs, address, 1, env={"DASK_DGVM__SCHEDULER_WAIT": "3s"})
    with dask.config.set({"dgvm.connect-timeout": RECONNECT}), dgvm.connect(address) as client:
        wait_for("a chunk store", lambda: len(dgvm.workers(client=client)) == 1, procs)
    kill(procs, "scheduler")
    t0 = time.monotonic()
    procs.wait_exit("workers", 60)
    assert time.monotonic() - t0 > 3
    assert "no scheduler came back" in procs.log("workers")
