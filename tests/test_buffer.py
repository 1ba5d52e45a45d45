"""GlobalBuffer on a real cluster: read/write against a NumPy reference, translate, free,
and every error, with the stores checked afterwards (fixture ``case``)."""

import numpy as np
import pytest

import dgvm

MiB = 2**20


def test_write_read_across_chunk_boundaries(case):
    rng = np.random.default_rng(1)
    n = 10 * MiB + 123
    ref = np.zeros(n, dtype=np.uint8)
    with dgvm.malloc(n, chunk_bytes=MiB + 7) as buf:
        assert buf.nbytes == n and buf.vaddr > 0
        assert len(buf.chunks) == -(-n // (MiB + 7))
        assert (buf.read(0, n) == 0).all()  # zero-filled
        for _ in range(20):
            off = int(rng.integers(0, n - 1))
            length = int(rng.integers(0, min(3 * MiB, n - off)))
            data = rng.integers(0, 256, length, dtype=np.uint8)
            buf.write(off, data)
            ref[off : off + length] = data
            a, b = sorted(rng.integers(0, n, 2).tolist())
            assert np.array_equal(buf.read(a, b - a), ref[a:b])
        assert np.array_equal(buf.read(0, n), ref)
        buf.write(n - 3, b"xyz")  # bytes-like input, last bytes of the last chunk
        assert bytes(buf.read(n - 3, 3)) == b"xyz"


def test_typed_writes(case):
    with dgvm.malloc(4096 * 8, chunk_bytes=4096) as buf:
        values = np.arange(4096, dtype=np.float64)
        buf.write(0, values)
        assert np.array_equal(buf.read(0, buf.nbytes).view(np.float64), values)


def test_translate_matches_chunks(case):
    with dgvm.malloc(8 * MiB, chunk_bytes=MiB, placement="round_robin") as buf:
        chunks = buf.chunks
        assert len({c.worker for c in chunks}) == len(case.capacities)
        for c in chunks:
            for delta in (0, 5, c.nbytes - 1):
                loc = dgvm.translate(c.vaddr + delta)
                assert (loc.alloc_id, loc.chunk_index, loc.worker, loc.offset) == (
                    buf.alloc_id, c.index, c.worker, delta,
                )
                assert loc.device == c.device and loc.tier == "device"
        many = dgvm.translate_many([c.vaddr for c in chunks])
        assert [m.chunk_index for m in many] == list(range(8))


def test_free_reuses_range_and_releases_store_memory(case):
    buf = dgvm.malloc(4 * MiB, chunk_bytes=MiB)
    vaddr = buf.vaddr
    assert sum(case.store_used().values()) == 4 * MiB
    buf.free()
    assert sum(case.store_used().values()) == 0
    assert dgvm.table() == []
    with dgvm.malloc(4 * MiB, chunk_bytes=MiB) as again:
        assert again.vaddr == vaddr and again.alloc_id != buf.alloc_id


def test_bad_sizes_raise_value_error(case):
    for bad in (0, -5, "lots"):
        with pytest.raises(ValueError):
            dgvm.malloc(bad)
    with pytest.raises(ValueError, match="chunk_bytes"):
        dgvm.malloc(MiB, chunk_bytes=0)
    with pytest.raises(ValueError, match="placement"):
        dgvm.malloc(MiB, placement="nowhere")


def test_invalid_addresses(case):
    buf = dgvm.malloc(2 * MiB, chunk_bytes=MiB)
    with pytest.raises(dgvm.InvalidAddress, match="2097152 bytes"):
        buf.read(2 * MiB - 2, 4)  # runs past the end
    with pytest.raises(dgvm.InvalidAddress):
        buf.write(-1, b"x")
    with pytest.raises(dgvm.InvalidAddress):
        dgvm.translate(buf.vaddr + 2 * MiB)
    with pytest.raises(dgvm.InvalidAddress):
        dgvm.translate(0)
    buf.free()
    with pytest.raises(dgvm.InvalidAddress, match="freed"):
        buf.read(0, 1)  # use after free
    with pytest.raises(dgvm.InvalidAddress, match="double free"):
        buf.free()
    with pytest.raises(dgvm.InvalidAddress):
        dgvm.translate(buf.vaddr)


def test_oom_leaves_nothing_behind(case):
    total = sum(case.capacities)
    with pytest.raises(dgvm.OutOfDeviceMemory) as e:
        dgvm.malloc(total, chunk_bytes=MiB)
    msg = str(e.value)
    assert all(w.address in msg for w in dgvm.workers())
    assert isinstance(e.value, MemoryError)
    assert dgvm.table() == [] and set(case.store_used().values()) == {0}
    assert all(w.used == 0 for w in dgvm.workers())


def test_worker_side_failure_rolls_back_every_worker(case):
    """A device that is fuller than the GVAT knows (another user took memory behind its
    back) fails its part; the parts made on other workers are freed again."""
    victim = max(dgvm.workers(), key=lambda w: w.capacity).address

    def eat(dask_worker):
        b = dask_worker.extensions["dgvm"].backend
        dask_worker._dgvm_eaten = b.allocate(b.free - MiB)

    def give_back(dask_worker):
        b = dask_worker.extensions["dgvm"].backend
        b.release(dask_worker._dgvm_eaten, b.used)
        del dask_worker._dgvm_eaten  # on cuda the memory goes with the last reference

    case.client.run(eat, workers=[victim])
    try:
        with pytest.raises(dgvm.OutOfDeviceMemory, match="rolled back"):
            dgvm.malloc(int(0.8 * sum(case.capacities)), chunk_bytes=MiB)
        used = case.store_used()
        assert all(v == 0 for w, v in used.items() if w != victim)
        assert dgvm.table() == []
    finally:
        case.client.run(give_back, workers=[victim])


def test_too_many_chunks_are_refused_at_once_naming_the_count(case):
    # 2**24 chunks of 8 bytes: refused before anything is placed or booked.
    with pytest.raises(dgvm.InvalidAddress, match=r"16777216 chunks was asked; at most 1048576"):
        dgvm.malloc(2**27, chunk_bytes=8, client=case.client)
    assert dgvm.table(client=case.client) == []
