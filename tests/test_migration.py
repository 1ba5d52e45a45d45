"""Homes that move: re-homing after remote reads, x.migrate, dgvm.rebalance, launches
placed before a move, and reads that find no room for a replica."""

import time

import dask
import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.protocol import messages

from test_kernels import axpy, spread_and_gather

MiB = 2**20


def homes(x) -> list[str]:
    """Each chunk's home, as the GVAT says (translate of its first byte)."""
    return [loc.worker for loc in dgvm.translate_many([c.vaddr for c in x.chunk_info()])]


def test_rehome_after_remote_reads(case):
    case.needs_workers(2, "remote reads")
    n = len(case.capacities)
    x, out = spread_and_gather(8 * n, 8)
    try:
        owner = out.alloc.home(0)
        remote = [k for k, w in enumerate(homes(x)) if w != owner]
        assert remote
        for _ in range(2):
            dgvm.launch(axpy, 1.0, x, x, out=out)
        dgvm.wait(out)
        assert [homes(x)[k] for k in remote] != [owner] * len(remote)
        dgvm.launch(axpy, 1.0, x, x, out=out)  # the third remote read moves the homes
        dgvm.wait(out)
        assert homes(x) == [owner] * n
        s = dgvm.stats()
        assert s["allocations"][x.alloc_id]["rehomes"] == len(remote)
        assert s["allocations"][x.alloc_id]["replicas"] == 0
        assert s["workers"][owner]["rehomes"] >= len(remote)
        assert case.store_chunks()[owner] == 2 * n  # every chunk of x and out; others none
        misses = s["allocations"][x.alloc_id]["misses"]
        dgvm.launch(axpy, 1.0, x, x, out=out)  # now all hits
        dgvm.wait(out)
        assert dgvm.stats()["allocations"][x.alloc_id]["misses"] == misses
        x.write_blocks(np.full(8 * n, 5.0))  # lands at the new homes
        assert np.array_equal(dnp.asnumpy(x), np.full(8 * n, 5.0))
        assert x.locations() == {(k,): owner for k in range(n)}
    finally:
        x.free()
        out.free()


def test_home_use_resets_the_count(case):
    n = len(case.capacities)
    x, out = spread_and_gather(8 * n, 8)
    try:
        before = homes(x)
        for _ in range(2):
            dgvm.launch(axpy, 1.0, x, x, out=out)
        dgvm.launch(axpy, 1.0, x, x, out=x)  # x's homes use (and write) it
        for _ in range(2):
            dgvm.launch(axpy, 1.0, x, x, out=out)
        dgvm.wait(out)
        assert homes(x) == before
        assert dgvm.stats()["allocations"][x.alloc_id]["rehomes"] == 0
        dgvm.launch(axpy, 1.0, x, x, out=out)  # the third read since the home used it
        dgvm.wait(out)
        assert homes(x) == [out.alloc.home(0)] * n
        assert np.array_equal(dnp.asnumpy(out), 4 * np.arange(8.0 * n))
    finally:
        x.free()
        out.free()


def test_launch_placed_before_a_move_still_lands(case):
    n = len(case.capacities)
    with dask.config.set({"dgvm.migration.rehome-after": 1}):
        x, out = spread_and_gather(8 * n, 8)
        owner = out.alloc.home(0)
        try:
            dgvm.launch(axpy, 1.0, x, x, out=out)  # out = 2 x0; x moves to out's worker
            # placed now, with x's old homes: the workers there send results to the new ones
            dgvm.launch(axpy, 2.0, out, out, out=x)  # x = 3 out = 6 x0
            assert np.array_equal(dnp.asnumpy(x), 6 * np.arange(8.0 * n))
            assert homes(x) == [owner] * n
        finally:
            x.free()
            out.free()


def test_migrate_moves_data_and_memory(case):
    case.needs_workers(2, "a worker to move to")
    buf = dgvm.malloc(4 * MiB, chunk_bytes=MiB, placement="packed")
    try:
        data = np.random.default_rng(0).integers(0, 255, 4 * MiB, dtype=np.uint8)
        buf.write(0, data)
        src = buf.home(1)
        dst = next(w for w in case.store_used() if w != src)
        used = case.store_used()
        assert buf.migrate([1, 2], dst) == [1, 2]
        assert [dgvm.translate(buf.vaddr + k * MiB).worker for k in range(4)] == [src, dst, dst, src]
        after = case.store_used()
        assert after[src] == used[src] - 2 * MiB and after[dst] == used[dst] + 2 * MiB
        assert np.array_equal(buf.read(0, 4 * MiB), data)
        assert buf.migrate([1], dst) == []  # already there
        assert dgvm.stats()["allocations"][buf.alloc_id]["migrated"] == 2
        with pytest.raises(dgvm.InvalidAddress, match="no dgvm worker"):
            buf.migrate([0], "tcp://127.0.0.1:1")
        with pytest.raises(dgvm.InvalidAddress, match="chunks 0..3"):
            buf.migrate([7], dst)
    finally:
        buf.free()



def test_a_migrate_after_a_write_moves_the_chunk_whose_write_report_comes_late(case):
    """The write's answer reaches the caller straight from the worker; its report to the
    GVAT may still be on the way when the caller asks for the move, and land while the
    chunk is copied: the chunk, copied after that write, is moved all the same."""
    case.needs_workers(2, "a worker to move to")
    from dgvm.protocol.messages import PULL, REPORT

    client = case.client
    x = dnp.from_numpy(np.arange(4096.0), chunks=4096, placement="packed")
    src = x.alloc.home(0)
    dst = next(w for w in case.store_used() if w != src)

    def slow_reports(dask_scheduler, seconds):
        import asyncio

        report = dask_scheduler.stream_handlers[REPORT]

        async def later(**kw):
            await asyncio.sleep(seconds)
            await report(**kw)

        dask_scheduler.stream_handlers[REPORT] = later
        dask_scheduler._dgvm_report = report

    def slow_pulls(dask_worker, seconds):
        import asyncio

        pull = dask_worker.handlers[PULL]

        async def later(*args, **kw):
            await asyncio.sleep(seconds)
            return await pull(*args, **kw)

        dask_worker.handlers[PULL] = later
        dask_worker._dgvm_pull = pull

    client.run_on_scheduler(slow_reports, seconds=0.3)
    client.run(slow_pulls, seconds=0.6, workers=[dst])
    try:
        x[:3] = -1.0
        x.wait()
        assert x.migrate([0], dst) == [0]
    finally:
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.stream_handlers.update(
            {REPORT: dask_scheduler._dgvm_report}))
        client.run(lambda dask_worker: dask_worker.handlers.update({PULL: dask_worker._dgvm_pull}),
                   workers=[dst])
    assert x.alloc.home(0) == dst
    want = np.arange(4096.0)
    want[:3] = -1.0
    np.testing.assert_array_equal(dnp.asnumpy(x), want)
    x.free()


def _hold_store_thread(case, worker: str, seconds: float) -> None:
    """Keep ``worker``'s chunk-store thread busy for ``seconds`` (its releases wait)."""
    def hold(dask_worker):
        dask_worker.plugins["dgvm-store"]._executor.submit(time.sleep, seconds)

    case.client.run(hold, workers=[worker])


def _holds(case, worker: str, alloc_id: int) -> list[int]:
    """The home chunks of ``alloc_id`` in ``worker``'s store, asked of the store itself."""
    def held(dask_worker):
        return sorted(dask_worker.extensions["dgvm"]._allocs.get(alloc_id, {}))

    return case.client.run(held, workers=[worker])[worker]


def test_the_old_home_releases_in_the_background_before_its_next_task(case):
    case.needs_workers(2, "a worker to move to")
    x = dnp.from_numpy(np.arange(1000.0), chunks=1000, placement="packed")
    out = dnp.zeros(1000, chunks=1000, colocate=x)
    old = x.alloc.home(0)
    new = next(w for w in case.store_used() if w != old)
    try:
        _hold_store_thread(case, old, 0.5)
        assert x.migrate(0, new) == [0]
        # The move ended with the GVAT's new home; the old copy goes once the old home's
        # store thread is free: not waited for.
        assert _holds(case, old, x.alloc_id) == [0]
        assert x.locations() == {(0,): new}
        x.write_blocks(np.full(1000, 5.0))  # at the new home
        # A task on the old home, sent after the release on the same stream, reads the
        # new values from the new home, never its own old copy.
        dgvm.launch(axpy, 1.0, x, x, out=out)
        assert np.array_equal(dnp.asnumpy(out), np.full(1000, 10.0))
        dgvm.stats()  # answers once every release is done
        assert _holds(case, old, x.alloc_id) == []
        # Back and forth while a release is pending: the pull back waits for it.
        _hold_store_thread(case, new, 0.3)
        assert x.migrate(0, old) == [0]
        assert x.migrate(0, new) == [0]
        assert np.array_equal(dnp.asnumpy(x), np.full(1000, 5.0))
        assert _holds(case, new, x.alloc_id) == [0]
        assert _holds(case, old, x.alloc_id) == []
    finally:
        x.free()
        out.free()



def test_a_rehome_to_a_worker_with_a_release_pending_does_not_wait_on_its_own_report(case):
    # A task already running on a worker when a release is sent there may report remote
    # reads before the release is done. The re-home runs inside the handler of that
    # report, and the answer to the release comes on the worker's stream behind it: the
    # worker waits for its release, not the scheduler for the answer.
    x = dnp.from_numpy(np.arange(16.0), chunks=8, placement="round_robin")
    reader = x.alloc.home(0)
    y = dnp.zeros(8, chunks=8, colocate=x)  # on reader
    other = x.alloc.home(1)
    try:
        _hold_store_thread(case, reader, 1.0)
        y.migrate(0, other)  # the release to reader waits for its store thread
        t0 = time.perf_counter()

        message = {  # as a task's report would say: chunk 1 of x read remotely
            "op": messages.REPORT, "alloc_id": y.alloc_id, "wrote": [],
            "reads": {str(x.alloc_id): {"hits": 0, "misses": 1, "home": [], "remote": [1]}},
        }

        def report(dask_worker):
            dask_worker.batched_stream.send(message)

        with dask.config.set({"dgvm.migration.rehome-after": 1}):
            case.client.run(report, workers=[reader])
            while homes(x)[1] != reader:
                assert time.perf_counter() - t0 < 8.0, "the re-home waited for its own report"
                time.sleep(0.02)
        assert case.client.submit(len, [1], workers=[reader], pure=False).result(timeout=5) == 1
        assert np.array_equal(dnp.asnumpy(x), np.arange(16.0))
    finally:
        x.free()
        y.free()

def _ipc(case) -> dict:
    return {w: s["ipc"] for w, s in dgvm.stats(client=case.client)["workers"].items()}


def _drop_cache(dask_worker):
    store = dask_worker.extensions["dgvm"]
    with store.lock:  # as every use of the backend's buffers
        store.backend.drop_cache()


def _until(cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_ipc_mappings_are_kept_see_new_writes_and_close_before_the_holder_frees(case):
    case.needs_workers(2, "a peer to map")
    if case.backend != "cuda":
        pytest.skip("IPC mappings are the cuda path's (cpu peers map whole arenas once)")
    n = len(case.capacities)
    # Chunks of 2 MiB: past ``access.REWRITTEN_PIECE``, a chunk whose replica a write
    # dropped is copied again (a smaller one would be read as a piece, over comm).
    big = 1 << 18
    with dask.config.set({"dgvm.migration.rehome-after": 100}):  # homes stay put
        x, out = spread_and_gather(big * n, big)
        try:
            owner = out.alloc.home(0)
            remote = sum(w != owner for w in homes(x))
            dgvm.launch(axpy, 1.0, x, x, out=out)  # misses: the owner opens x's buffers
            dgvm.wait(out)
            first = _ipc(case)[owner]
            assert first["opened"] >= remote > 0
            x.write_blocks(np.full(big * n, 3.0))  # in place at the homes; replicas dropped
            dgvm.launch(axpy, 1.0, x, x, out=out)  # misses again, through kept mappings
            assert np.array_equal(dnp.asnumpy(out), np.full(big * n, 6.0))
            again = _ipc(case)[owner]
            assert again["opened"] == first["opened"] and again["reused"] >= first["reused"] + remote
            # A chunk going back and forth: each end keeps the other's buffer open.
            buf = dgvm.malloc(MiB, chunk_bytes=MiB, placement="packed")
            try:
                data = np.random.default_rng(1).integers(0, 255, MiB, dtype=np.uint8)
                buf.write(0, data)
                a = buf.home(0)
                b = next(w for w in case.store_used() if w != a)
                for k in range(4):
                    assert buf.migrate([0], (b, a)[k % 2]) == [0]
                    assert np.array_equal(buf.read(0, MiB), data)
            finally:
                buf.free()
        finally:
            x.free()
            out.free()
    # Freed buffers wait in the holders' caches, still exported; given back to the
    # driver they retire: the peers close their mappings first, then they are freed.
    assert any(i["exported"] for i in _ipc(case).values())
    case.client.run(_drop_cache)
    _until(lambda: all(i["exported"] == i["retiring"] == i["open"] == 0 for i in _ipc(case).values()),
           f"mappings and exports left: {_ipc(case)}")


def test_darray_migrate_by_block_over_comm(case):
    case.needs_workers(2, "a worker to move to")
    with dask.config.set({"dgvm.transfer.same-host": False}):
        a = np.arange(64.0).reshape(8, 8)
        x = dnp.from_numpy(a, chunks=(4, 4), placement="packed")
        try:
            dst = next(w for w in case.store_used() if w != x.alloc.home(0))
            assert x.migrate((1, 1), dst) == [3]
            assert x.locations()[(1, 1)] == dst
            assert np.array_equal(dnp.asnumpy(x), a)
            assert dgvm.stats()["workers"][dst]["paths"]["comm"]["bytes"] >= 128
            with pytest.raises(IndexError, match="outside the block grid"):
                x.migrate((2, 0), dst)
        finally:
            x.free()


def test_rebalance_evens_out_memory(case):
    case.needs_workers(2, "memory to even out between workers")
    def fractions():
        return [w.used / w.capacity for w in dgvm.workers()]

    x = dnp.from_numpy(np.arange(4 * MiB, dtype=np.float64), chunks=MiB // 4, placement="packed")
    try:
        before = fractions()
        moved = dgvm.rebalance()
        after = fractions()
        assert moved["chunks"] > 0 and moved["bytes"] == moved["chunks"] * 2 * MiB
        assert max(after) - min(after) < max(before) - min(before)
        assert max(after) - min(after) <= 2 * 2 * MiB / min(case.capacities) + 1e-9
        assert np.array_equal(dnp.asnumpy(x), np.arange(4 * MiB, dtype=np.float64))
        assert dgvm.rebalance()["chunks"] == 0  # already even
    finally:
        x.free()


def test_no_room_for_a_replica_reads_chunk_by_chunk(case):
    case.needs_workers(2, "a replica on another worker")
    n = 4 * MiB // 8  # elements per chunk: 4 MiB chunks
    workers = {w.address: w for w in dgvm.workers()}
    small = min(workers, key=lambda a: workers[a].capacity)
    other = next(a for a in workers if a != small)
    x = dnp.from_numpy(np.arange(2.0 * n), chunks=n)
    z = dnp.from_numpy(np.ones(n // 4), chunks=n // 4)  # one 1 MiB chunk
    out = dnp.zeros(2 * n, chunks=n)
    y = dnp.zeros(n // 4, chunks=n // 4)
    x.migrate([0, 1], other)
    z.migrate(0, other)
    out.migrate([0, 1], small)
    y.migrate(0, small)
    free = next(w.free for w in dgvm.workers() if w.address == small)
    filler = dgvm.malloc(free - 3 * MiB, chunk_bytes=MiB)
    try:
        filler.migrate(range(filler.nchunks), small)
        dgvm.launch(axpy, 1.0, z, z, out=y)  # a 1 MiB replica of z on `small`
        dgvm.wait(y)
        assert dgvm.stats()["allocations"][z.alloc_id]["replicas"] == 1
        dgvm.launch(axpy, 1.0, x, x, out=out)  # 4 MiB chunks of x do not fit there
        assert np.array_equal(dnp.asnumpy(out), 2 * np.arange(2.0 * n))
        s = dgvm.stats()
        assert s["workers"][small]["evicted"] == 1 and s["workers"][small]["transient"] == 2
        assert s["allocations"][z.alloc_id]["replicas"] == 0
        assert s["allocations"][x.alloc_id]["replicas"] == 0
    finally:
        for a in (x, z, out, y, filler):
            a.free()


def test_migrate_without_room_raises_and_changes_nothing(case):
    case.needs_workers(2, "a worker to move to")
    workers = {w.address: w for w in dgvm.workers()}
    small = min(workers, key=lambda a: workers[a].capacity)
    n = workers[small].free + MiB  # one chunk larger than the small worker's free memory
    buf = dgvm.malloc(n, chunk_bytes=n)
    try:
        home = buf.home(0)
        assert home != small
        buf.write(n - 4, b"tail")
        used = case.store_used()
        with pytest.raises(dgvm.OutOfDeviceMemory, match=f"no room on {small}"):
            buf.migrate([0], small)
        assert dgvm.translate(buf.vaddr).worker == home
        assert case.store_used() == used
        assert bytes(buf.read(n - 4, 4)) == b"tail"
    finally:
        buf.free()


def test_a_fetched_home_replaces_a_replica_made_meanwhile():
    # A pull checks for a replica before a launch's miss adds one; the fetched copy
    # becomes the home and the replica must go (else it outlives a later move, untracked).
    from dgvm import backends
    from dgvm.worker.store import ChunkStore, StoredChunk

    store = ChunkStore(backends.create("cpu", 8 * MiB, None), "tcp://here")
    try:
        b = store.backend
        store.add_replica(5, 0, b.allocate(MiB), MiB, 3)
        fetched = StoredChunk(b.allocate(MiB), MiB, 3)
        assert b.used == 2 * MiB
        assert store.promote(5, "me", 0, fetched)
        assert store.replica(5, 0) is None and store.is_home(5, 0)
        assert b.used == MiB
    finally:
        store.close()


def test_a_closed_store_keeps_no_chunk_or_view():
    # Replicas of allocations homed elsewhere go with the store, and the typed views a
    # chunk keeps go with its buffer (on cpu the memory is unmapped at close: a view kept
    # past it would read unmapped pages).
    from dgvm import backends
    from dgvm.worker.store import ChunkStore

    store = ChunkStore(backends.create("cpu", 8 * MiB, None), "tcp://here")
    b = store.backend
    store.allocate(1, "me", [0], [MiB])
    store.add_replica(2, 0, b.allocate(MiB), MiB, 0)
    held = [store.local(1, 0), store.local(2, 0)]
    for c in held:
        c.typed(b, "<f8", (MiB // 8,))[:] = 1.0
    store.close()
    assert store.local(1, 0) is None and store.local(2, 0) is None and store.replicas(2) == []
    assert all(not c.views for c in held)
