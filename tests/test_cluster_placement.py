"""Placement on a real cluster of mixed devices (capacities and speeds per worker)."""

import random
import time
import uuid
from collections import Counter

import pytest

import dgvm
import dgvm.array as dnp

MiB = 2**20


def shares(buf_or_chunks):
    chunks = getattr(buf_or_chunks, "chunks", buf_or_chunks)
    return Counter(c.worker for c in chunks)


def workers_by_speed():
    return sorted(dgvm.workers(), key=lambda w: w.speed)


def test_balanced_shares_follow_speed(case):
    n = 28
    with dgvm.malloc(n * MiB, chunk_bytes=MiB) as buf:
        got = shares(buf)
        ws = workers_by_speed()
        total_speed = sum(case.speeds)
        for w, s in zip(ws, sorted(case.speeds)):
            assert w.speed == pytest.approx(s / min(case.speeds))
            assert abs(got[w.address] - n * s / total_speed) <= 1, (got, case.speeds)
        # the fastest device got the most chunks
        assert got[ws[-1].address] == max(got.values())


def test_balanced_respects_free_memory_and_headroom(case):
    # 80% of the whole cluster: the small, slow devices fill up to their headroom,
    # the rest spills to the others; nobody exceeds capacity minus 10%.
    total = sum(case.capacities)
    with dgvm.malloc(int(0.8 * total), chunk_bytes=MiB) as buf:
        per = Counter()
        for c in buf.chunks:
            per[c.worker] += c.nbytes
        for w in dgvm.workers():
            assert per[w.address] <= 0.9 * w.capacity
            assert w.used == per[w.address]
        assert case.store_used() == {w: per[w] for w in case.store_used()}


def test_packed_uses_fewest_workers(case):
    biggest = max(dgvm.workers(), key=lambda w: w.capacity)
    with dgvm.malloc(biggest.capacity // 2, chunk_bytes=MiB, placement="packed") as buf:
        assert set(shares(buf)) == {biggest.address}


def test_round_robin(case):
    n = len(case.capacities)
    with dgvm.malloc(4 * n * MiB, chunk_bytes=MiB, placement="round_robin") as buf:
        order = sorted({c.worker for c in buf.chunks[:n]})
        assert len(order) == n
        assert [c.worker for c in buf.chunks[:n]] == [c.worker for c in buf.chunks[n : 2 * n]]


def test_colocate_follows_other_allocation(case):
    a = dnp.zeros((64, 64), dtype="float32", chunks=(8, 64), placement="round_robin")
    b = dnp.zeros((64, 64), dtype="float64", chunks=(8, 64), colocate=a)
    try:
        assert a.locations() == b.locations()
        assert b.alloc.alloc_id != a.alloc.alloc_id
        info = dgvm.table(alloc_id=b.alloc_id)[0]
        assert info.placement == f"colocate:{a.alloc_id}"
    finally:
        a.free()
        b.free()


def test_colocate_falls_back_to_balanced_when_full(case):
    big = max(dgvm.workers(), key=lambda w: w.capacity)
    n = int(0.6 * big.capacity) // MiB
    # 'packed' puts the anchor on the device with most room; its partner fits only half
    # there, the rest goes by 'balanced' to the others.
    with dgvm.malloc(n * MiB, chunk_bytes=MiB, placement="packed") as anchor:
        assert set(shares(anchor)) == {big.address}
        with dgvm.malloc(n * MiB, chunk_bytes=MiB, colocate=anchor) as partner:
            got = shares(partner)
            assert 0 < got[big.address] < n
            assert sum(got.values()) == n
            for w in dgvm.workers():
                assert w.used <= 0.9 * w.capacity


def test_array_larger_than_any_device(case):
    largest = max(case.capacities)
    n = int(1.2 * largest) // 8
    n -= n % 1000
    x = dnp.zeros((n,), dtype="float64", chunks=(n // 40,))
    try:
        assert x.nbytes > largest
        assert len(set(x.locations().values())) > 1
        got = dnp.asnumpy(x)
        assert got.shape == (n,) and not got.any()
    finally:
        x.free()


def test_placement_counts_the_load_dask_measured_not_its_guess(case):
    """A task of a kind Dask never timed is 0.5 s of work in its occupancy: placement
    counts it as none, and a task of a timed kind as its measured time, which takes part
    of that worker's share (at most one pass's worth: dgvm.gvat.placement.Balanced)."""
    from distributed import Event

    client = case.client
    fast = workers_by_speed()[-1].address
    n = 28
    with dgvm.malloc(n * MiB, chunk_bytes=MiB) as buf:
        idle = shares(buf)[fast]

    def hold(name):
        Event(name).wait(timeout=30)

    def held_task(kind, i):
        gate = f"{kind}-gate-{i}"
        future = client.submit(hold, gate, key=f"{kind}-{uuid.uuid4().hex}", workers=[fast], pure=False)
        while future.key not in client.processing([fast]).get(fast, ()):
            time.sleep(0.01)
        return future, Event(gate, client=client)

    def timed(kind, dask_scheduler=None):
        prefix = dask_scheduler.task_prefixes[kind]
        return prefix.duration_average >= 0 or prefix.max_exec_time > 0

    # A worker's heartbeat tells Dask how long its running task has run so far, and then
    # the kind is timed: try again with a fresh kind if one came before the allocation.
    for attempt in range(5):
        # Dask's task prefix (key_split drops hex words): never timed yet
        kind = "dgvm-test-hold-" + "".join(random.choices("ghijklmnopqrstuvwxyz", k=8))
        future, gate = held_task(kind, 0)
        try:
            with dgvm.malloc(n * MiB, chunk_bytes=MiB) as buf:
                got = shares(buf)[fast]
                untimed = not client.run_on_scheduler(timed, kind)
            if untimed:
                assert got == idle  # Dask's guess for the untimed task counts for nothing
                time.sleep(0.2)  # so that the kind's measured time outweighs a pass over the allocation
        finally:
            gate.set()
        if untimed:
            break
        future.result(timeout=30)
    else:
        pytest.fail("a heartbeat timed every fresh kind of task before the allocation")
    future.result(timeout=30)  # now the kind has a measured duration

    future, gate = held_task(kind, 1)
    try:
        with dgvm.malloc(n * MiB, chunk_bytes=MiB) as buf:
            assert 0 < shares(buf)[fast] < idle
    finally:
        gate.set()
    future.result(timeout=30)
