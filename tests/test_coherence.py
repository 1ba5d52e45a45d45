"""Coherence under moves: migrations and rebalances running beside computations never lose
a write, nor serve a stale or zeroed chunk (docs/architecture.md, "Coherence").

Threads compute, write arrays and write buffers, each checking every answer against its
own NumPy copy, while another thread moves chunks of every allocation to random workers
and rebalances; in-process workers and worker processes. Every answer must be right."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.backends.cuda import gpu_count
from dgvm.client.session import call_scheduler
from dgvm.protocol import messages
from dgvm.protocol.errors import InvalidAddress

SECONDS = 8.0


def _computing(tid: int, client, stop: threading.Event, wrong: list, done: dict) -> None:
    rng = np.random.default_rng(tid)
    h = rng.random(3000)
    x = dnp.from_numpy(h, chunks=300, client=client)
    buf = dgvm.malloc(8 * 2048, chunk_bytes=8 * 256, client=client)
    hb = np.zeros(2048)
    n = 0
    try:
        while not stop.is_set():
            n += 1
            step = n % 4
            if step == 0:  # a write, then a read of every chunk
                x[...] = x + 1.0
                h = h + 1.0
                got = dnp.asnumpy(x)
                if not np.array_equal(got, h):
                    wrong.append((tid, n, "array", int((got != h).sum())))
            elif step == 1:  # a computation reading chunks wherever they are
                if not np.isclose(float((x * 2.0).sum()), float((h * 2.0).sum()), rtol=1e-12):
                    wrong.append((tid, n, "sum"))
            elif step == 2:  # a buffer written from the caller
                hb = rng.random(2048)
                buf.write(0, hb.tobytes())
            else:
                got = np.frombuffer(buf.read(0, hb.nbytes), dtype=np.float64)
                if not np.array_equal(got, hb):
                    wrong.append((tid, n, "buffer", int((got != hb).sum())))
    except Exception as e:  # noqa: BLE001  (any error is a wrong answer here)
        wrong.append((tid, n, "error", repr(e)))
    finally:
        done[tid] = n
        buf.free()
        x.free()


def _moving(client, stop: threading.Event, counts: dict) -> None:
    try:
        _move_until(client, stop, counts)
    except Exception as e:  # noqa: BLE001  (reported by the test)
        counts["error"] = repr(e)


def _move_until(client, stop: threading.Event, counts: dict) -> None:
    rng = random.Random(7)
    workers = sorted(client.scheduler_info()["workers"])
    while not stop.is_set():
        for a in dgvm.table(client=client):
            try:
                moved = call_scheduler(messages.MIGRATE, client, alloc_id=a.alloc_id,
                                       indices=rng.sample(range(a.nchunks), min(3, a.nchunks)),
                                       worker=rng.choice(workers), owner=a.owner)
                counts["moved"] += len(moved.moved)
            except InvalidAddress:  # freed meanwhile
                pass
        if rng.random() < 0.3:
            counts["rebalanced"] += dgvm.rebalance(client=client)["chunks"]


@pytest.mark.parametrize("backend, processes", [
    ("cpu", False), ("cpu", True), pytest.param("cuda", True, marks=pytest.mark.gpu),
], ids=["cpu-threads", "cpu-processes", "cuda"])
def test_moves_beside_computations_lose_nothing(backend, processes):
    n = gpu_count() if backend == "cuda" else 3
    if n < 2:
        pytest.skip("moves need two GPUs")
    cluster = dgvm.LocalCluster(n_workers=n, backend=backend, device_memory=["128MiB"] * n,
                                processes=processes, dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        stop, wrong, done = threading.Event(), [], {}
        counts = {"moved": 0, "rebalanced": 0}
        threads = [threading.Thread(target=_computing, args=(t, client, stop, wrong, done)) for t in range(6)]
        mover = threading.Thread(target=_moving, args=(client, stop, counts))
        for t in threads:
            t.start()
        mover.start()
        time.sleep(SECONDS)
        stop.set()
        for t in (*threads, mover):
            t.join(120)
            assert not t.is_alive(), "a computation or the mover hung"
        assert not wrong, f"{len(wrong)} wrong answers of {sum(done.values())}: {wrong[:5]}"
        assert "error" not in counts and counts["moved"] >= 10, counts  # the moves did run beside them
        assert sum(done.values()) >= 6 * 8
    finally:
        client.close()
        cluster.close()
