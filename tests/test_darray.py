"""The DArray data model: creation, NumPy round trips, where blocks live."""

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp

CASES = [
    ((1000,), "float64", (300,)),
    ((37, 53), "int32", (10, 20)),
    ((20, 30, 7), "complex64", (6, 11, 7)),
    ((5, 7), "bool", (5, 7)),
    ((129, 65), "uint8", (64, 64)),
    ((40, 40), "float32", "auto"),
]


@pytest.mark.parametrize("shape,dtype,chunks", CASES)
def test_from_numpy_round_trip(case, shape, dtype, chunks):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    x = dnp.from_numpy(a, chunks=chunks)
    try:
        assert x.shape == a.shape and x.dtype == a.dtype and x.nbytes == a.nbytes
        assert x.numblocks == tuple(len(c) for c in x.chunks)
        got = dnp.asnumpy(x)
        assert got.dtype == a.dtype and np.array_equal(got, a)
        assert np.array_equal(np.asarray(x), a)
    finally:
        x.free()


def test_zeros_metadata_and_locations(case):
    x = dnp.zeros((200, 300), dtype="float32", chunks=(50, 100))
    try:
        assert x.numblocks == (4, 3)
        locs = x.locations()
        assert set(locs) == {(i, j) for i in range(4) for j in range(3)}
        addrs = {w.address for w in dgvm.workers()}
        assert set(locs.values()) <= addrs
        info = dgvm.table(alloc_id=x.alloc_id, chunks=True)[0]
        assert info.shape == (200, 300) and info.dtype == "<f4" and info.nchunks == 12
        assert info.vaddr == x.vaddr
        # block (i, j) is chunk i * 3 + j, of 50 * 100 * 4 bytes
        assert [c.worker for c in info.chunks] == [locs[(i, j)] for i in range(4) for j in range(3)]
        assert {c.nbytes for c in info.chunks} == {20000}
        assert not dnp.asnumpy(x).any()
        # the global address of element (i, j): its block's chunk plus its place in the block
        loc = dgvm.translate(info.chunks[4].vaddr + 4 * (3 * 100 + 7))
        assert (loc.chunk_index, loc.worker) == (4, locs[(1, 1)])
    finally:
        x.free()


def test_bad_shapes(case):
    with pytest.raises(ValueError):
        dnp.zeros((3, -1))
    assert dnp.zeros((0, 5)).shape == (0, 5)  # no element: held on the caller, not placed
    assert dgvm.table() == []


def test_from_numpy_oom_frees_everything(case):
    big = np.zeros(sum(case.capacities) // 8, dtype=np.float64)
    with pytest.raises(dgvm.OutOfDeviceMemory):
        dnp.from_numpy(big, chunks=len(big) // 50)
    assert dgvm.table() == []


def _fails_on_chunk_1(xp, chunk, index):
    if index == 1:
        raise ValueError("chunk 1 refused")
    return index


def test_a_failed_map_chunks_keeps_nothing_alive(case):
    # The case fixture then checks that x was freed: the task's error, kept by Dask, must
    # not hold the caller's frames (and so x) alive.
    from dgvm.client.apply import map_chunks

    x = dnp.zeros((4, 4), chunks=2)
    with pytest.raises(ValueError, match="chunk 1 refused"):
        map_chunks(x.alloc, _fails_on_chunk_1)
