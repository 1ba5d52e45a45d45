"""Moves of many chunks in one request: one PULL to the new home, one export request to
each old home, the copies in flight together (``TransferPath.fetch_many``), in batches;
and a home that leaves in the middle of such a move."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.backends.cpu import CpuBackend
from dgvm.protocol import messages
from dgvm.transfer import KINDS, base, shm
from dgvm.transfer.base import TransferPath
from dgvm.transfer.ipc_mappings import BufferGone
from dgvm.worker import plugin as worker_plugin

from killing import process_cluster, until

MiB = 2**20


def _homes(x) -> list[str]:
    return [loc.worker for loc in dgvm.translate_many([c.vaddr for c in x.chunk_info()])]


def _count(handler: str, dask_worker=None):
    """Count ``handler``'s requests to this worker, kept on the worker (``_counted``)."""
    served = dask_worker.handlers[handler]
    calls = dask_worker.__dict__.setdefault("dgvm_test_calls", [])

    @functools.wraps(served)
    async def counted(*args, **kwargs):
        calls.append((handler, kwargs))
        return await served(*args, **kwargs)

    counted.original = served
    dask_worker.handlers[handler] = counted


def _uncount(handler: str, dask_worker=None):
    dask_worker.handlers[handler] = getattr(dask_worker.handlers[handler], "original", dask_worker.handlers[handler])


def _counted(case) -> dict:
    """{worker: [(handler, kwargs)]} counted since the last call, and forgotten."""
    def take(dask_worker=None):
        calls = dask_worker.__dict__.setdefault("dgvm_test_calls", [])
        out = list(calls)
        calls.clear()
        return out

    return case.client.run(take)


def test_many_chunks_move_in_one_pull_and_one_export_per_home(case, monkeypatch):
    # Shared memory copies by several threads in pieces that do not divide the chunks, and
    # a move copies in batches of a few chunks (several holds of the store's lock).
    monkeypatch.setattr(shm, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(shm, "PIECE_BYTES", MiB // 3 + 8)
    monkeypatch.setattr(shm, "COPY_THREADS", 3)
    for kind in KINDS:
        monkeypatch.setattr(kind, "batch_bytes", 3 * MiB)
    a = np.random.default_rng(3).standard_normal((24, 65_536))  # 24 chunks of 1.5 MiB
    x = dnp.from_numpy(a, chunks=(3, 65_536 // 2 + 1), placement="round_robin")
    try:
        before = _homes(x)
        dst = max(dgvm.workers(), key=lambda w: w.capacity).address
        assert len(set(before)) == len(case.capacities)  # on every worker
        case.client.run(_count, messages.PULL)
        case.client.run(_count, messages.EXPORT)
        _counted(case)
        try:
            moved = x.migrate(list(range(len(before))), dst)
        finally:
            case.client.run(_uncount, messages.PULL)
            case.client.run(_uncount, messages.EXPORT)
        assert moved == [i for i, w in enumerate(before) if w != dst]
        assert _homes(x) == [dst] * len(before)
        calls = _counted(case)
        assert [h for h, _ in calls.get(dst, [])] == [messages.PULL]  # one request to the new home
        for w in set(before) - {dst}:  # one export request to each old home, for all its chunks
            (handler, kwargs), = calls[w]
            assert handler == messages.EXPORT and kwargs["move"]
            assert sorted(kwargs["indices"]) == [i for i, h in enumerate(before) if h == w]
        np.testing.assert_array_equal(dnp.asnumpy(x), a)
        assert dgvm.stats()["allocations"][x.alloc_id]["migrated"] == len(moved)
        used = case.store_used()
        assert used[dst] >= a.nbytes and all(used[w] == 0 for w in used if w != dst)
        # The chunks were moved whole: written and read at their new home.
        x[5:7] = -1.0
        a[5:7] = -1.0
        np.testing.assert_array_equal(dnp.asnumpy(x * 2), a * 2)
    finally:
        x.free()


def test_a_rebalance_moves_the_chunks_of_an_allocation_to_a_worker_in_one_pull(case):
    x = dnp.from_numpy(np.arange(2 * MiB, dtype=np.float64), chunks=MiB // 8, placement="packed")
    try:
        case.client.run(_count, messages.PULL)
        _counted(case)
        try:
            moved = dgvm.rebalance()
        finally:
            case.client.run(_uncount, messages.PULL)
        calls = _counted(case)
        assert moved["chunks"] > 1
        pulls = {w: len(c) for w, c in calls.items() if c}
        assert pulls and all(n == 1 for n in pulls.values()), pulls
        assert sum(len(kw["chunks"]) for c in calls.values() for _, kw in c) == moved["chunks"]
        np.testing.assert_array_equal(dnp.asnumpy(x), np.arange(2 * MiB, dtype=np.float64))
    finally:
        x.free()


class _Path(TransferPath):
    """A path whose copies fail as told: ``gone`` descriptors are freed at their holder,
    ``full`` ones find no room."""

    name = "test"

    @staticmethod
    def usable(src, dst):
        return True

    def export(self, store, alloc_id, index, to=None):
        raise NotImplementedError

    def fetch_into(self, desc, dst):
        if desc.get("gone"):
            raise BufferGone("freed after its export")
        dst[:] = desc["value"]
        return 0.001


@pytest.fixture
def cpu_backend():
    b = CpuBackend(capacity=16 * MiB)
    try:
        yield b
    finally:
        b.close()


def test_fetch_many_passes_over_a_buffer_gone_and_gives_everything_back_when_full(cpu_backend):
    p = _Path()
    descs = [{"nbytes": MiB, "value": 1}, {"nbytes": MiB, "gone": True}, {"nbytes": 2 * MiB, "value": 3}]
    got = p.fetch_many(descs, cpu_backend)
    assert got[1] is None
    assert int(cpu_backend.view(got[0][0], MiB)[-1]) == 1
    assert int(cpu_backend.view(got[2][0], 2 * MiB)[-1]) == 3
    assert cpu_backend.used == 3 * MiB
    for g, d in zip(got, descs):
        if g is not None:
            cpu_backend.release(g[0], d["nbytes"])
    # A chunk that does not fit: the buffers of the chunks before it go back too.
    with pytest.raises(MemoryError):
        p.fetch_many([{"nbytes": 4 * MiB, "value": 1}, {"nbytes": 64 * MiB, "value": 2}], cpu_backend)
    assert cpu_backend.used == 0


def test_shared_memory_copies_in_threads_match_the_holder(monkeypatch, cpu_backend):
    monkeypatch.setattr(shm, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(shm, "PIECE_BYTES", 100_003)
    monkeypatch.setattr(shm, "COPY_THREADS", 3)
    holder = CpuBackend(capacity=8 * MiB)
    path = shm.SharedMemoryPath(shm.PeerArenas())
    try:
        sizes = [MiB, 3 * MiB + 5, 17]
        data = [np.random.default_rng(k).integers(0, 256, n, dtype=np.uint8) for k, n in enumerate(sizes)]
        handles = [holder.allocate(n, zero=False) for n in sizes]
        for h, d in zip(handles, data):
            holder.view(h, d.size)[:] = d
        descs = [{"shm": holder.shm_name, "offset": int(h), "nbytes": n} for h, n in zip(handles, sizes)]
        got = path.fetch_many(descs, cpu_backend)
        for (h, seconds), d in zip(got, data):
            np.testing.assert_array_equal(cpu_backend.view(h, d.size), d)
            assert seconds >= 0
        assert cpu_backend.used == sum(sizes)
        with pytest.raises(MemoryError):  # no room for the last: nothing kept
            path.fetch_many(descs + [{**descs[0], "nbytes": 16 * MiB}], cpu_backend)
        assert cpu_backend.used == sum(sizes)
    finally:
        path.close()
        path.arenas.close()
        holder.close()


def test_batches_keep_the_order_and_a_large_chunk_alone():
    wanted = [(i, {"nbytes": n}) for i, n in enumerate([2, 2, 5, 1, 1, 1, 9])]
    runs = worker_plugin._batches(wanted, 4)
    assert [[i for i, _ in run] for run in runs] == [[0, 1], [2], [3, 4, 5], [6]]
    assert base.shares([{"nbytes": 1}, {"nbytes": 3}], 2.0) == [0.5, 1.5]


def _hold_store_lock(seconds: float, dask_worker=None):
    """Hold this worker's store lock for ``seconds`` (in a thread of its own)."""
    store = dask_worker.extensions["dgvm"]
    held = threading.Event()

    def hold():
        with store.lock:
            held.set()
            time.sleep(seconds)

    threading.Thread(target=hold, daemon=True).start()
    held.wait()


@pytest.mark.slow
def test_a_home_that_leaves_in_the_middle_of_a_many_chunk_move():
    """Chunks of 3 homes move to one in one request; one old home is killed while its
    export waits: the move raises ChunkLost naming it, the chunks of the home that stayed
    are not moved, their writes go on (thawed), and a later move takes them."""
    with process_cluster("cpu", 3, "64MiB") as client:
        a = np.arange(12 * 65_536, dtype=np.float64)
        x = dnp.from_numpy(a, chunks=65_536, placement="round_robin", client=client)
        homes = _homes(x)
        dst, victim, other = homes[0], homes[1], homes[2]
        assert len({dst, victim, other}) == 3
        pids = client.run(os.getpid)
        client.run(_hold_store_lock, 30.0, workers=[victim])  # its export waits for the lock
        with ThreadPoolExecutor(1) as pool:
            move = pool.submit(x.migrate, list(range(12)), dst)
            time.sleep(1.0)  # the export requests reached both old homes
            assert not move.done()
            os.kill(pids[victim], signal.SIGKILL)
            with pytest.raises(dgvm.ChunkLost, match=victim):
                move.result(timeout=60)
        until(lambda: victim not in [w.address for w in dgvm.workers(client=client)], 30, "the victim left")
        stayed = [i for i, w in enumerate(homes) if w == other]
        now = _homes(x)
        assert [now[i] for i in stayed] == [other] * len(stayed)
        assert [now[i] for i, w in enumerate(homes) if w == dst] == [dst] * homes.count(dst)
        # The chunks of the home that stayed take writes again (their move ended), and move.
        i = stayed[0]
        t0 = time.monotonic()
        x[i * 65_536: i * 65_536 + 3] = -1.0
        assert time.monotonic() - t0 < 10
        a[i * 65_536: i * 65_536 + 3] = -1.0
        assert x.migrate(stayed, dst) == stayed
        got = np.concatenate([dnp.asnumpy(x[j * 65_536:(j + 1) * 65_536]) for j in stayed])
        np.testing.assert_array_equal(got, np.concatenate([a[j * 65_536:(j + 1) * 65_536] for j in stayed]))
        x.free()


def test_a_migrate_answer_makes_its_own_moved_event_old_news(case):
    from dgvm.client.allocation import LiveAllocations
    from dgvm.client.session import session_of

    buf = dgvm.malloc(2 * MiB, chunk_bytes=MiB, placement="packed")
    try:
        dst = next(w.address for w in dgvm.workers() if w.address != buf.home(0))
        assert buf.migrate([0], dst) == [0]
        event, = [m for _, m in case.client.get_events(messages.MOVED_TOPIC)
                  if m["alloc_id"] == buf.alloc_id]
        assert event["moves"] == buf.moves_known > 0
        live = session_of(case.client).part(LiveAllocations)
        live._on_moved((time.time(), event))  # the event of the move the answer told of
        assert not buf.stale
        live._on_moved((time.time(), {**event, "moves": event["moves"] + 1}))  # a later move
        assert buf.stale
        buf.refresh()
        live._on_moved((time.time(), {k: v for k, v in event.items() if k != "moves"}))  # (a promotion's)
        assert buf.stale
        assert buf.migrate([1], dst) == [1]
        assert buf.moves_known > event["moves"]  # numbers grow
        assert buf.homes() == [dst, dst]
    finally:
        buf.free()
