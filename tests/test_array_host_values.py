"""Reduction results stay on the caller as host values (dgvm.array._engine.deferred): nothing is
stored until a cluster operation needs them, they enter elementwise trees as constants
(0-d) or are written once (n-d), and arithmetic on them alone runs on the caller."""

from __future__ import annotations

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp


def data():
    h = np.random.default_rng(3).random((120, 90))
    return h, dnp.asarray(h, chunks=(40, 30))


def test_a_reduction_stores_nothing_and_reads_back_without_a_request(case):
    h, x = data()
    before = case.allocations()
    s, m = x.sum(), x.mean(axis=0)
    assert s.host_value is not None and m.host_value is not None
    assert case.allocations() == before
    assert float(s) == pytest.approx(h.sum(), rel=1e-12)
    np.testing.assert_allclose(dnp.asnumpy(m), h.mean(axis=0), rtol=1e-12)
    assert s.wait() is s and case.allocations() == before
    # reducing a host value again runs on the caller: it stays there
    assert float(m.max()) == pytest.approx(h.mean(axis=0).max(), rel=1e-12)
    assert m.host_value is not None and case.allocations() == before
    # a tree over a computed array that was freed fails where it is written
    b = x * 2
    b.wait()
    b.free()
    with pytest.raises(dgvm.InvalidAddress, match="freed"):
        b + 1


def test_scalar_results_enter_trees_as_constants(case):
    h, x = data()
    before = case.allocations()
    centred = x - x.mean()  # the mean is a constant of the tree, not a stored 0-d array
    np.testing.assert_allclose(dnp.asnumpy(centred), h - h.mean(), atol=1e-12)
    assert case.allocations() == before + 1  # the result only
    # float32 data and a float64 scalar: the array rules' dtype, as NumPy's 0-d arrays give
    x32 = dnp.asarray(h.astype(np.float32), chunks=(40, 30))
    got = x32 * x.max()
    assert got.dtype == np.float64
    np.testing.assert_allclose(dnp.asnumpy(got), h.astype(np.float32) * h.max(), rtol=1e-7)


def test_arithmetic_on_host_values_alone_runs_on_the_caller(case):
    h, x = data()
    before = case.allocations()
    alpha = x.sum() / (x * x).sum()
    beta = dnp.sqrt(alpha) + x.min()
    assert beta.host_value is not None
    assert float(beta) == pytest.approx(np.sqrt(h.sum() / (h * h).sum()) + h.min(), rel=1e-12)
    row = x.sum(axis=0) * 2 - x.max(axis=0)
    np.testing.assert_allclose(dnp.asnumpy(row), h.sum(axis=0) * 2 - h.max(axis=0), rtol=1e-12)
    # in place on a host value keeps it on the caller, in its own dtype
    count = x.argmax()
    count += 1.7
    assert count.dtype == np.int64 and int(count) == int(h.argmax() + 1.7)
    assert case.allocations() == before  # (x * x).sum() reduces its tree unstored too


def test_an_nd_host_value_is_stored_when_the_cluster_needs_it(case):
    h, x = data()
    m = x.mean(axis=0)
    before = case.allocations()
    z = x - m  # a (90,) leaf of a tree on the cluster: written once
    np.testing.assert_allclose(dnp.asnumpy(z), h - h.mean(axis=0), atol=1e-12)
    assert m.host_value is None and case.allocations() == before + 2
    m[3] = -1.0  # a stored one is an ordinary array
    want = h.mean(axis=0)
    want[3] = -1.0
    np.testing.assert_allclose(dnp.asnumpy(m), want, rtol=1e-12)
    r = x.sum(axis=1)
    r[:2] = 0.0  # a write stores it first
    np.testing.assert_allclose(dnp.asnumpy(r), np.r_[0.0, 0.0, h.sum(axis=1)[2:]], rtol=1e-12)
    r.free()
    t = x.max(axis=1)
    t.free()  # freeing one that was never stored
    with pytest.raises(dgvm.DgvmError, match="freed"):
        t + 1


def test_a_host_value_that_does_not_fit_raises_and_stays_on_the_caller(case):
    n = int(0.34 * sum(case.capacities)) // 8
    x = dnp.ones((2, n), chunks=(1, -(-n // 8)))  # 68% of the cluster
    s = x.sum(axis=0)  # 34% of the cluster, known on the caller
    before = dgvm.table(client=case.client)
    with pytest.raises(dgvm.OutOfDeviceMemory):
        s + x  # s must be stored for that, and does not fit
    assert s.host_value is not None and dgvm.table(client=case.client) == before
    np.testing.assert_array_equal(dnp.asnumpy(s)[[0, -1]], [2.0, 2.0])


def test_partials_are_assembled_as_np_block_would():
    from dgvm.array._engine.blockwise import assemble

    rng = np.random.default_rng(2)
    rows, cols = (3, 1, 4), (2, 5)
    parts = {(i, j): rng.standard_normal((r, c)) for i, r in enumerate(rows) for j, c in enumerate(cols)}
    parts[(1, 1)] = np.arange(5).reshape(1, 5)  # an int block among floats: promoted, as np.block
    want = np.block([[parts[(i, j)] for j in range(2)] for i in range(3)])
    got = assemble(parts, (3, 2))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(assemble({(0,): np.ones(2), (1,): np.zeros(3)}, (2,)), np.r_[np.ones(2), np.zeros(3)])
    assert assemble({(): np.float64(4.0)}, ()) == 4.0
    with pytest.raises(ValueError, match="blocks for a grid"):
        assemble({b: p for b, p in parts.items() if b != (2, 1)}, (3, 2))
    parts[(2, 0)] = np.ones((4, 3))  # does not line up with its column
    with pytest.raises(ValueError, match=r"block \(2, 0\)"):
        assemble(parts, (3, 2))


def test_a_host_values_chunks_follow_dasks_chunk_size_setting():
    import dask

    from dgvm.protocol import chunk_grid

    shape = (3000, 700)
    assert chunk_grid.auto(shape, np.float64) == chunk_grid.normalize("auto", shape, np.float64)
    with dask.config.set({"array.chunk-size": "64KiB"}):
        small = chunk_grid.auto(shape, np.float64)
        assert small == chunk_grid.normalize("auto", shape, np.float64)
    assert small != chunk_grid.auto(shape, np.float64)


def test_a_tasks_partials_travel_packed_one_buffer_per_dtype_and_come_back_as_they_were():
    from dgvm.array._engine.packed import PACKED, pack

    chunk = np.arange(12.0).reshape(3, 4)
    partials = {
        (0, 0): chunk.sum(axis=0, keepdims=True),
        (0, 1): (np.array([[7.5]]), np.array([[3]], dtype=np.int64)),  # an argmin's value and index
        (1, 0): np.float64(2.5).reshape(()),  # 0-d
        (1, 1): chunk[:, :2],  # a view of a chunk: sent as its own copy
        (2, 0): ("a label", None, (np.array([1.0, 2.0]), np.array([True]))),  # nested
        (2, 1): np.zeros(2, dtype=[("a", "<i8")]),
        (3, 0): np.zeros(2, dtype="V8"),  # the same dtype.str as the one above, not the same dtype
        (3, 1): np.arange(3, dtype=">f8"),  # not native: as it is
        (4, 0): np.arange(PACKED // 8 + 1, dtype=np.float64),  # large: as it is
    }
    packed = pack(partials, np)
    assert set(packed.buffers) == {(np.dtype("f8"), True), (np.dtype("i8"), True), (np.dtype("?"), True),
                                   (np.dtype([("a", "<i8")]), True), (np.dtype("V8"), True)}
    got = packed.unpack()
    assert got.keys() == partials.keys()

    def same(g, w):
        if isinstance(w, tuple):
            assert isinstance(g, tuple) and len(g) == len(w)
            for a, b in zip(g, w):
                same(a, b)
        elif isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
        else:
            assert g == w

    for b, want in partials.items():
        same(got[b], want)
    assert not np.shares_memory(got[(1, 1)], chunk)


def test_packing_on_a_full_device_joins_the_partials_on_the_host_and_dask_counts_what_is_sent():
    from dask.sizeof import sizeof

    from dgvm.array._engine import packed

    class FullDevice:  # (an array module whose allocations fail)
        ndarray = np.ndarray

        @staticmethod
        def concatenate(arrays):
            raise MemoryError("out of memory")

    parts = [np.ones(2), np.arange(3.0)]
    np.testing.assert_array_equal(packed._joined(FullDevice, parts, np.dtype("f8")), np.r_[np.ones(2), np.arange(3.0)])
    big = np.zeros(packed.PACKED // 8 + 1)
    p = packed.pack({(0,): big, (1,): np.ones(3)}, np)
    assert sizeof(p) >= big.nbytes + 24
