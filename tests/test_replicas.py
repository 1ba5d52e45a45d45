"""Durable copies (``replicas=k``): every chunk on k workers, current after every write, and a
worker's loss survived (issue: nothing lost, nothing hangs).

The in-process cases check the copies byte for byte against their homes after each kind of
write; the process cluster kills a worker with work in flight and compares every answer
with NumPy.
"""

from __future__ import annotations

import os
import signal
import time

import dask
import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as da
from dgvm.client.apply import map_chunks
from dgvm.protocol.errors import ChunkLost, InvalidArgument, OutOfDeviceMemory
from dgvm.worker.plugin import RELEASE_WAIT
from killing import process_cluster


def _copies(client, alloc_id: int) -> dict:
    """chunk index -> {worker: (role, bytes)} of every copy the workers' stores hold."""
    def held(dask_worker, alloc_id):
        store = dask_worker.extensions["dgvm"]
        out = {}
        for role, table in (("home", store._allocs), ("backup", store._replicas)):
            for i, c in table.get(alloc_id, {}).items():
                if role == "home" or c.durable:
                    out[i] = (role, store.backend.read(c.handle, c.nbytes, 0, c.nbytes).tobytes())
        return out

    per_worker = client.run(held, alloc_id=alloc_id)
    chunks: dict = {}
    for w, held_here in per_worker.items():
        for i, v in held_here.items():
            chunks.setdefault(i, {})[w] = v
    return chunks


def info_of(client, alloc_id: int):
    info, = [a for a in dgvm.table(chunks=True, client=client) if a.alloc_id == alloc_id]
    return info


def _assert_coherent(client, alloc_id: int, k: int) -> None:
    """Each chunk has one home and k - 1 backups elsewhere, all with the home's bytes, and
    the GVAT's table says where they are."""
    info, = [a for a in dgvm.table(chunks=True, client=client) if a.alloc_id == alloc_id]
    assert info.copies == k
    held = _copies(client, alloc_id)
    assert sorted(held) == list(range(info.nchunks))
    for c in info.chunks:
        copies = held[c.index]
        homes = [w for w, (role, _) in copies.items() if role == "home"]
        assert homes == [c.worker], (c.index, copies.keys(), c.worker)
        assert sorted(w for w, (role, _) in copies.items() if role == "backup") == sorted(c.backups)
        assert len(c.backups) == k - 1
        assert len({data for _, data in copies.values()}) == 1, f"chunk {c.index}: copies differ"


def test_malloc_keeps_every_chunk_on_k_workers_through_writes(case):
    case.needs_workers(2, "copies of each chunk on two workers")
    client = case.client
    buf = dgvm.malloc(40_000, chunk_bytes=4_000, replicas=2, client=client)
    try:
        _assert_coherent(client, buf.alloc_id, 2)
        data = np.random.default_rng(1).integers(0, 256, 40_000, dtype=np.uint8)
        buf.write(0, data)
        _assert_coherent(client, buf.alloc_id, 2)
        buf.write(3_990, np.full(30, 7, np.uint8))  # across a chunk boundary
        data[3_990:4_020] = 7
        _assert_coherent(client, buf.alloc_id, 2)
        np.testing.assert_array_equal(buf.read(0, 40_000), data)

        def double(xp, chunk, i):
            chunk[:] = chunk * 2

        map_chunks(buf, double)
        _assert_coherent(client, buf.alloc_id, 2)
        np.testing.assert_array_equal(buf.read(0, 40_000), data * 2)
    finally:
        buf.free()


def test_array_writes_keep_copies_current(case):
    case.needs_workers(2, "copies of each chunk on two workers")
    client = case.client
    ref = np.arange(6_000, dtype=np.float64).reshape(60, 100)
    x = da.from_numpy(ref, chunks=(20, 50), replicas=2, client=client)
    _assert_coherent(client, x.alloc.alloc_id, 2)
    x += 1.5
    ref += 1.5
    x[5:30, 10:70] = -2.0
    ref[5:30, 10:70] = -2.0
    v = x[::2, 3:]
    v *= 3
    ref[::2, 3:] *= 3
    x.wait()
    _assert_coherent(client, x.alloc.alloc_id, 2)
    np.testing.assert_array_equal(da.asnumpy(x), ref)


def test_persist_changes_the_copies_of_an_array(case):
    client = case.client
    ref = np.linspace(0, 1, 3_000)
    x = da.from_numpy(ref, chunks=500, client=client)
    k = len(client.scheduler_info()["workers"])  # a copy on every worker
    y = (x * 2).persist(replicas=k)
    _assert_coherent(client, y.alloc.alloc_id, k)
    np.testing.assert_array_equal(da.asnumpy(y), ref * 2)
    y.persist(replicas=1)
    _assert_coherent(client, y.alloc.alloc_id, 1)
    assert case.store_chunks() and sum(case.store_chunks().values()) == 12  # x's 6, y's 6


def test_the_config_default_and_creation_functions(case):
    case.needs_workers(2, "copies of each chunk on two workers")
    client = case.client
    with dask.config.set({"dgvm.replicas": 2}):
        a = da.zeros((100, 100), chunks=(50, 100), client=client)
        b = dgvm.malloc(1000, chunk_bytes=500, client=client)
    c = da.full((100,), 3.0, chunks=50, client=client, replicas=2)
    d = da.ones((100,), chunks=50, client=client)
    try:
        for arr in (a, c, d):  # (their fills are asynchronous: done once every copy holds them)
            arr.wait()
        for arr, k in ((a.alloc, 2), (b, 2), (c.alloc, 2), (d.alloc, 1)):
            _assert_coherent(client, arr.alloc_id, k)
        np.testing.assert_array_equal(da.asnumpy(c), np.full(100, 3.0))
    finally:
        b.free()


def test_bad_replicas_are_refused_and_leave_nothing(case):
    case.needs_workers(2, "copies of each chunk on two workers")
    client = case.client
    n = len(client.scheduler_info()["workers"])
    with pytest.raises(InvalidArgument, match=rf"replicas={n + 1}.*{n} live workers"):
        dgvm.malloc(1000, replicas=n + 1, client=client)
    with pytest.raises(InvalidArgument, match="replicas"):
        da.zeros(10, replicas=0, client=client)
    with pytest.raises(TypeError, match="replicas"):
        dgvm.malloc(1000, replicas="2", client=client)
    # Room for one copy of everything but not for two: all or nothing.
    chunk = 8 * 2**20
    nbytes = int(0.6 * sum(case.capacities)) // chunk * chunk
    with pytest.raises(OutOfDeviceMemory):
        dgvm.malloc(nbytes, chunk_bytes=chunk, replicas=2, client=client)
    dgvm.malloc(nbytes, chunk_bytes=chunk, client=client).free()  # one copy fits
    x = da.zeros(10, client=client)
    with pytest.raises(InvalidArgument, match="replicas"):
        x.persist(replicas=n + 1)
    _assert_coherent(client, x.alloc.alloc_id, 1)


def test_moves_keep_the_copies(case):
    case.needs_workers(2, "copies of each chunk on two workers")
    client = case.client
    ref = np.arange(4_000, dtype=np.int64)
    x = da.from_numpy(ref, chunks=500, replicas=2, client=client)
    info, = [a for a in dgvm.table(chunks=True, client=client) if a.alloc_id == x.alloc.alloc_id]
    # A home moved onto its backup's worker, and one moved to a third worker.
    c0, c1 = info.chunks[0], info.chunks[1]
    x.alloc.migrate([0], c0.backups[0])
    third = [w for w in client.scheduler_info()["workers"] if w != c1.worker and w not in c1.backups]
    if third:  # (two workers: every worker holds a copy)
        x.alloc.migrate([1], third[0])
    deadline = time.monotonic() + 10
    while True:  # the backup that became a home is made again in the background
        try:
            _assert_coherent(client, x.alloc.alloc_id, 2)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    x += 1
    dgvm.rebalance(client=client)
    x += 1
    x.wait()
    _assert_coherent(client, x.alloc.alloc_id, 2)
    np.testing.assert_array_equal(da.asnumpy(x), ref + 2)


def test_a_new_backup_on_an_old_home_outlives_its_release(case):
    """A home moved onto its backup's worker: the new backup may go to the old home, whose
    release of the chunk is still on its way there. The copy must be made after the
    release (not passed over as the home's own data, then released): the GVAT's backup is
    a copy in that store, which a loss of the new home would promote."""
    from dgvm.protocol.messages import RELEASE

    if len(case.capacities) < 3:
        pytest.skip("needs 3 workers (a copy on each)")
    client = case.client
    buf = dgvm.malloc(4_000, chunk_bytes=4_000, replicas=3, client=client)  # a copy on each
    held_back = {}
    try:
        data = np.random.default_rng(3).integers(0, 256, 4_000, dtype=np.uint8)
        buf.write(0, data)
        c, = [a for a in dgvm.table(chunks=True, client=client) if a.alloc_id == buf.alloc_id][0].chunks
        old_home = c.worker

        def hold_releases(dask_worker, seconds):  # the old home's stream is slow
            import asyncio

            release = dask_worker.stream_handlers[RELEASE]

            async def later(**kw):
                await asyncio.sleep(seconds)
                await release(**kw)

            dask_worker.stream_handlers[RELEASE] = later
            held_back[dask_worker.address] = release

        client.run(hold_releases, seconds=1.0, workers=[old_home])
        buf.migrate([0], c.backups[0])  # the new backup can only go to the old home
        deadline = time.monotonic() + 10
        while True:  # the backup that became a home is made again in the background
            try:
                _assert_coherent(client, buf.alloc_id, 3)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        info, = [a for a in dgvm.table(chunks=True, client=client) if a.alloc_id == buf.alloc_id]
        assert old_home in info.chunks[0].backups
        np.testing.assert_array_equal(buf.read(0, 4_000), data)
    finally:
        client.run(lambda dask_worker: dask_worker.stream_handlers.update(
            {RELEASE: held_back[dask_worker.address]}) if dask_worker.address in held_back else None)
        buf.free()


@dgvm.kernel
def _add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1.0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_killed_worker_loses_nothing_that_had_a_copy(backend):
    """4 cpu worker processes (cuda: one per GPU); one is killed while in-place
    operations, a launch and a read of replicated arrays are queued: every answer is
    NumPy's, the arrays without copies on it say ChunkLost, copies are made again on the
    survivors (its nanny's new worker among them), nothing leaks."""
    if backend == "cuda":
        from dgvm.backends.cuda import gpu_count

        if gpu_count() < 2:
            pytest.skip("needs 2 GPUs")
    with process_cluster(backend, 4, "128MiB") as client:
        n = 600_000
        ref = np.arange(n, dtype=np.float64)
        x = da.from_numpy(ref, chunks=n // 16, replicas=2, client=client)
        kbuf = min(3, len(pids := client.run(os.getpid)))
        buf = dgvm.malloc(1 << 20, chunk_bytes=1 << 16, replicas=kbuf, client=client)
        data = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8)
        buf.write(0, data)
        plain = da.from_numpy(ref, chunks=n // 16, client=client)  # no copies
        info, = [a for a in dgvm.table(chunks=True, client=client) if a.alloc_id == plain.alloc.alloc_id]
        victim = info.chunks[0].worker
        for _ in range(12):  # queued on every worker, the victim's among them
            x += 1.0
            x.persist()
        y = da.empty(n, chunks=n // 16, client=client, replicas=2)
        dgvm.launch(_add_one, x, out=y)
        # Queued behind those: a task naming x (copies) and plain (none), which runs again
        # or fails once copies took over, and one naming no allocation with copies, which
        # fails at once.
        mixed = x + plain
        tail = mixed * 2
        tail.persist()
        ref += 12
        os.kill(pids[victim], signal.SIGKILL)
        t0 = time.monotonic()
        np.testing.assert_array_equal(da.asnumpy(x), ref)
        np.testing.assert_array_equal(da.asnumpy(y), ref + 1)
        np.testing.assert_array_equal(buf.read(0, 1 << 20), data)
        # Bounded: a new copy waits at most RELEASE_WAIT for the releases sent to its worker.
        assert time.monotonic() - t0 < 2 * RELEASE_WAIT
        with pytest.raises(ChunkLost, match=victim):
            da.asnumpy(plain)
        for a in (mixed, tail):  # naming only what was lost
            with pytest.raises(ChunkLost, match=victim) as lost:
                da.asnumpy(a)
            assert f"of allocation {x.alloc.alloc_id}" not in str(lost.value), lost.value
        x *= 2
        np.testing.assert_array_equal(da.asnumpy(x), ref * 2)
        # Copies are made again on the survivors and the new worker (room for all). The GVAT
        # books a new copy before its holder has copied it: waited for in the stores too.
        deadline = time.monotonic() + 30
        while True:
            try:
                for alloc_id, k in ((x.alloc.alloc_id, 2), (y.alloc.alloc_id, 2), (buf.alloc_id, kbuf)):
                    info, = [a for a in dgvm.table(chunks=True, client=client) if a.alloc_id == alloc_id]
                    assert all(len(c.backups) == k - 1 and victim not in (c.worker, *c.backups)
                               for c in info.chunks), alloc_id
                held = _copies(client, x.alloc.alloc_id)
                table = info_of(client, x.alloc.alloc_id).chunks
                assert all(sorted(w for w, (role, _) in held.get(c.index, {}).items() if role == "backup")
                           == sorted(c.backups) for c in table), (
                    [(c.index, c.worker, c.backups, {w: r for w, (r, _) in held.get(c.index, {}).items()})
                     for c in table if sorted(c.backups) != sorted(
                         w for w, (r, _) in held.get(c.index, {}).items() if r == "backup")],
                    client.run(lambda dask_worker, a=x.alloc.alloc_id: {
                        i: (c.durable, c.nbytes) for i, c in dask_worker.extensions["dgvm"]._replicas.get(a, {}).items()}))
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        _assert_coherent(client, x.alloc.alloc_id, 2)
        for a in (x, y, plain, mixed, tail):
            a.free()
        buf.free()
        assert dgvm.table(client=client) == []
        used = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.used)
        assert set(used.values()) == {0}, used


def _hold_refreshes_from(dask_worker, home):
    """This worker's copies of chunks homed at ``home`` refresh only once ``home`` left
    the cluster, and then fail as a copy from a home that left does (the cpu backend
    could still read a dead worker's memory it had mapped; GPUs and TCP cannot)."""
    import asyncio

    from dgvm.protocol import messages
    from dgvm.protocol.errors import ChunkLost

    plugin = dask_worker.plugins[messages.STORE_PLUGIN]
    refresh = plugin.refresh

    async def held(alloc_id, owner, chunks, new=False, after_release=None):
        if any(c[1] == home for c in chunks):
            dask_worker.dgvm_held_refresh = True
            for _ in range(600):
                if home not in (await dask_worker.scheduler.identity())["workers"]:
                    break
                await asyncio.sleep(0.05)
            raise ChunkLost(f"chunks {[c[0] for c in chunks]} of allocation {alloc_id}: their home "
                            f"{home} left the cluster")
        return await refresh(alloc_id, owner, chunks, new=new, after_release=after_release)

    dask_worker.handlers[messages.REFRESH] = messages.served(held)


@pytest.mark.slow
def test_a_write_whose_home_dies_while_its_copies_take_it_is_not_lost():
    """A task wrote chunks at their home and reported it; the home dies while the copies
    refresh, so the copy that becomes the home lacks the write: the task runs again on it
    for those chunks (the other chunks' copies hold its write, and are not written twice)."""
    with process_cluster(n_workers=3) as client:
        n = 60_000
        ref = np.arange(n, dtype=np.float64)
        x = da.from_numpy(ref, chunks=n // 6, replicas=2, placement="round_robin", client=client)
        victim = x.alloc.homes()[0]
        others = [w for w in client.run(os.getpid) if w != victim]
        pid = client.run(os.getpid, workers=[victim])[victim]
        client.run(_hold_refreshes_from, home=victim, workers=others)
        x += 1.0
        x.persist()
        deadline = time.monotonic() + 60
        while not any(client.run(lambda dask_worker: getattr(dask_worker, "dgvm_held_refresh", False),
                                 workers=others).values()):
            assert time.monotonic() < deadline, "no refresh of the victim's chunks"
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        np.testing.assert_array_equal(da.asnumpy(x), ref + 1)
        x *= 2
        np.testing.assert_array_equal(da.asnumpy(x), (ref + 1) * 2)
        x.free()
        assert dgvm.table(client=client) == []


def test_a_backup_booked_where_a_read_replica_arrives_is_never_dropped_as_one():
    """A task's miss may copy a chunk to a worker while the GVAT books a new backup there:
    its read replica becomes the backup. The GVAT does not count it as a read replica too
    (a write drops those), and the worker's store keeps the backup through a write's
    invalidation and through a late read replica of the same chunk."""
    from dgvm import backends
    from dgvm.worker.store import ChunkStore
    from test_gvat import MiB, make_gvat

    g = make_gvat(1024 * MiB, 1024 * MiB)
    a = g.allocate("me", np.full(2, MiB), placement="packed", copies=2)
    home = g.inventory.by_uid[int(a.homes[0])].address
    backup, = [g.inventory.by_uid[u].address for u in a.backups[0]]
    assert g.add_replica(a.alloc_id, 0, backup, MiB, "shm", 0.001, source=home, version=0) == "kept"
    assert not a.replicas.get(0)  # booked once, as the backup
    drop, refresh = g.wrote(a.alloc_id, [0])
    assert drop == {} and refresh == {backup: [0]}

    class Copy:  # a transfer path that copies a host buffer
        def fetch_into(self, desc, view):
            view[:] = desc["data"]

    store = ChunkStore(backends.create("cpu", 8 * MiB, None), "tcp://here")
    try:
        b = store.backend
        store.add_replica(5, 0, b.allocate(MiB), MiB, 0)  # the miss's copy
        data = np.full(MiB, 7, np.uint8)
        store.refresh(5, "me", 0, Copy(), {"nbytes": MiB, "data": data}, 1, ("tcp://home", 1), new=True)
        assert store.replica(5, 0).durable
        store.add_replica(5, 0, b.allocate(MiB), MiB, 1)  # another miss's late copy
        assert store.replica(5, 0).durable and b.used == MiB  # the backup kept, the copy given back
        assert store.drop_replicas(5, [0], reads=True) == 0  # a write's invalidation
        np.testing.assert_array_equal(b.read(store.replica(5, 0).handle, MiB, 0, MiB), data)
        assert store.drop_replicas(5, [0]) == MiB  # dropped as a backup
        assert b.used == 0
    finally:
        store.close()
