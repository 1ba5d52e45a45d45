"""Arrays with no elements (dgvm.array._engine.zero_size): every shape the standard covers, with
NumPy's shapes, dtypes and values, held on the caller without an allocation."""

from __future__ import annotations

import numpy as np
import pytest

import dgvm.array as dnp


def same(got, want):
    """``got`` (a DArray) has NumPy's shape, dtype and values ``want``."""
    assert isinstance(got, dnp.DArray), type(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want.shape, want.dtype)
    np.testing.assert_array_equal(dnp.asnumpy(got), want)


def test_creation_and_elementwise_make_no_allocation(case):
    before = case.allocations()
    same(dnp.zeros((0, 3)), np.zeros((0, 3)))
    same(dnp.zeros((0, 20_000_000)), np.zeros((0, 20_000_000)))  # "auto" chunks of a long empty axis
    same(dnp.zeros((0, 20_000_000), chunks=("auto", "auto")), np.zeros((0, 20_000_000)))
    same(dnp.zeros((0, 20_000_000), chunks={1: "auto"}), np.zeros((0, 20_000_000)))
    same(dnp.ones((2, 0), dtype=dnp.int8), np.ones((2, 0), dtype=np.int8))
    same(dnp.full((0,), 7), np.full((0,), 7))
    same(dnp.arange(0), np.arange(0))
    same(dnp.arange(5, 2), np.arange(5, 2))
    same(dnp.linspace(0, 1, 0), np.linspace(0, 1, 0))
    same(dnp.eye(0), np.eye(0))
    same(dnp.asarray(np.empty((0, 4), np.float32)), np.empty((0, 4), np.float32))
    z = dnp.zeros((0, 3))
    same(dnp.zeros_like(z, dtype=dnp.int32), np.zeros((0, 3), np.int32))
    same(z * 2 + 1, np.zeros((0, 3)))
    same(dnp.exp(z) > 0, np.zeros((0, 3), bool))
    z += 1  # in place: nothing to do
    z[...] = 5
    same(z, np.zeros((0, 3)))
    assert len(z) == 0 and list(z) == [] and z.size == 0
    assert np.asarray(z).shape == (0, 3)
    assert case.allocations() == before  # none of these placed anything


def test_operations_on_and_into_empty_arrays_give_numpys_results(case):
    h = np.arange(12.0).reshape(3, 4)
    x = dnp.asarray(h, chunks=(2, 2))
    z, hz = dnp.zeros((0, 4)), np.zeros((0, 4))
    same(z + x[0], hz + h[0])  # broadcast against an array with elements
    same(x[5:2], h[5:2])
    same(x[:, 4:], h[:, 4:])
    same(x[x > 100], h[h > 100])
    same(dnp.take(x, dnp.asarray(np.array([], np.int64)), axis=0), np.take(h, [], axis=0).astype(h.dtype))
    rows, cols = dnp.nonzero(x > 100)
    same(rows, np.nonzero(h > 100)[0])
    same(dnp.concat([z, x]), np.concatenate([hz, h]))
    same(dnp.stack([z, z]), np.stack([hz, hz]))
    same(dnp.reshape(z, (4, 0)), hz.reshape(4, 0))
    same(z.T, hz.T)
    same(dnp.broadcast_to(dnp.zeros((0, 1)), (0, 5)), np.zeros((0, 5)))
    same(dnp.astype(z, dnp.int16), hz.astype(np.int16))
    # Reductions: the identity where there is one, a result with elements where an
    # empty axis is reduced, NumPy's error where there is no identity.
    assert float(dnp.sum(z)) == 0.0 and float(dnp.prod(z)) == 1.0
    same(dnp.sum(z, axis=0), hz.sum(axis=0))
    same(dnp.sum(z, axis=1), hz.sum(axis=1))
    same(dnp.cumulative_sum(dnp.zeros(0)), np.cumulative_sum(np.zeros(0)))
    with pytest.raises(ValueError):
        dnp.max(z)
    # A product over an empty axis has elements: zeros, stored like any result.
    same(dnp.zeros((3, 0)) @ dnp.zeros((0, 2)), np.zeros((3, 2)))
    same(dnp.vecdot(z, x[0]), np.vecdot(hz, h[0]))
    same(dnp.sort(dnp.zeros(0), descending=True), np.zeros(0))
    same(dnp.unique_values(z), np.unique_values(hz))
    same(dnp.linalg.vector_norm(dnp.zeros(0)), np.linalg.vector_norm(np.zeros(0)))
    # repeats of any integer dtype, as the standard's (NumPy's own refuses uint64)
    same(dnp.repeat(dnp.zeros(0, dtype=dnp.bool), dnp.asarray(np.zeros(0, np.uint64))), np.zeros(0, bool))
    same(dnp.linalg.inv(dnp.zeros((0, 3, 3))), np.zeros((0, 3, 3)))


def test_mixed_calls_gather_nothing_they_do_not_need(case, monkeypatch):
    import dask.array as da

    import dgvm
    from dgvm.array._engine import zero_size

    h = np.arange(12.0).reshape(4, 3)
    x = dnp.asarray(h, chunks=(2, 2))
    gathered = []
    real = dnp.DArray.to_numpy

    def counting(self):
        if self.size:
            gathered.append(self.shape)
        return real(self)

    monkeypatch.setattr(dnp.DArray, "to_numpy", counting)
    m = x > 100  # selects nothing
    x[m] = x[m] * 2  # NumPy's outlier idiom: nothing to read or write
    same(x[np.array([], np.int64)], h[np.array([], np.int64)])
    same(x[[]], h[[]])
    same(dnp.take(x, dnp.asarray(np.array([], np.int64)), axis=1), np.take(h, [], axis=1).astype(h.dtype))
    same(dnp.concat([dnp.zeros((4, 0)), x], axis=1), h)
    assert gathered == [(4, 3)]  # the concat's result, read by `same`: x itself never
    assert dnp.concat([dnp.zeros((4, 0)), x], axis=1).chunks == x.chunks
    with pytest.raises(ValueError):
        x[0] = dnp.zeros(0)  # NumPy: cannot broadcast (0,) into (3,)
    # A result with elements from an empty array beside small ones: their values, read.
    same(dnp.searchsorted(dnp.zeros(0), x[0]), np.searchsorted(np.zeros(0), h[0]))
    monkeypatch.setattr(zero_size, "GATHER_LIMIT", 2)
    with pytest.raises(dgvm.DgvmError, match="gather"):
        dnp.searchsorted(dnp.zeros(0), x[0])
    assert isinstance(dnp.broadcast_arrays(dnp.zeros((0, 1)), dnp.zeros((1, 3))), list)
    z = dnp.zeros((0, 3))
    assert z.locations() == {} and dnp.rechunk(z, (1, 1)).shape == (0, 3)
    z.settle()
    with pytest.raises(dgvm.DgvmError, match="no elements"):
        z.alloc
    assert dnp.to_dask(z).compute().shape == (0, 3)
    assert dnp.from_dask(da.zeros((0, 2))).shape == (0, 2)
    assert dnp.finfo(dnp.float32).tiny == np.finfo(np.float32).tiny  # NumPy's other names


def test_aliases_stay_aliases_and_a_freed_array_still_raises(case):
    import dgvm

    assert dnp.concat is dnp.manipulation.concat  # concatenate is NumPy's form of it (axis by position)
    x = dnp.asarray(np.arange(6.0), chunks=3)
    x.free()
    with pytest.raises(dgvm.DgvmError):
        x[5:2]  # an empty key of a freed array: freed, as any other key says


def test_chunk_specs_that_are_arrays_still_work():
    from dgvm.protocol import chunk_grid

    assert chunk_grid.normalize(np.array([5, 5]), (10,), "f8") == ((5, 5),)
