"""A reduction's partials along its reduced axes are combined where they are made
(``reduction_ops.Fold``): each worker sends one partial per block of the reduced grid, the
caller combines the workers', and every result is NumPy's."""

from __future__ import annotations

import dask
import numpy as np
import pytest

import dgvm.array as dnp
from dgvm.array._engine import blockwise


@pytest.fixture
def sent(monkeypatch):
    """The blocks each reduction task sent back, one list per task."""
    parts: list = []
    real = blockwise.gather

    def gather(client, futures, direct=False):
        out = real(client, futures, direct=direct)
        parts.extend([block for block, _ in part.layout] for part in out)
        return out

    monkeypatch.setattr(blockwise, "gather", gather)
    return parts


def test_each_worker_sends_one_partial_per_block_of_the_reduced_grid(case, sent):
    h = np.random.default_rng(1).standard_normal((160, 60))
    x = dnp.asarray(h, chunks=(20, 20))  # 8 x 3 blocks over the workers
    homes = x.locations()  # (over the cpu case's 3 workers; one per GPU on cuda)
    np.testing.assert_allclose(dnp.asnumpy(x.sum(axis=0)), h.sum(axis=0), rtol=1e-12, atol=1e-12)
    assert len(sent) == len(set(homes.values()))
    for blocks in sent:  # one per column of blocks the worker holds, along axis 0 folded
        assert all(b[0] == 0 for b in blocks) and len(blocks) <= 3
    sent.clear()
    np.testing.assert_allclose(dnp.asnumpy(x.mean(axis=1)), h.mean(axis=1), rtol=1e-12)
    assert all(b[1] == 0 for bs in sent for b in bs) and all(len(bs) <= 8 for bs in sent)
    sent.clear()
    assert float(x.sum()) == pytest.approx(h.sum(), rel=1e-12)
    assert [len(b) for b in sent] == [1] * len(sent)  # the whole sum: one value per worker
    sent.clear()
    # a running total needs every block's: not folded
    np.testing.assert_allclose(dnp.asnumpy(dnp.cumulative_sum(x, axis=0)), np.cumsum(h, axis=0), rtol=1e-12, atol=1e-12)
    assert sum(len(b) for b in sent) == 24


@pytest.mark.parametrize("axis", [0, 1, (0, 1), None, -1])
def test_every_folded_reduction_is_numpys(case, axis):
    rng = np.random.default_rng(2)
    f = rng.standard_normal((70, 45))
    f[3, 4], f[40, 4], f[50, 30] = np.nan, np.inf, -np.inf
    i = rng.integers(-9, 9, (70, 45)).astype(np.int64)
    b = rng.random((70, 45)) < 0.97
    xf, xi, xb = (dnp.asarray(a, chunks=(15, 10)) for a in (f, i, b))
    with np.errstate(all="ignore"):  # (NumPy's own inf - inf and overflow: the reference)
        checks = {
            "sum": (xf.sum(axis=axis), f.sum(axis=axis)),
            "max": (xf.max(axis=axis), f.max(axis=axis)),
            "min": (xf.min(axis=axis), f.min(axis=axis)),
            "mean": (xf.mean(axis=axis), f.mean(axis=axis)),
            "var": (xf.var(axis=axis), f.var(axis=axis)),
            "int prod": (xi.prod(axis=axis), i.prod(axis=axis)),  # (wraps as NumPy's)
            "int max": (xi.max(axis=axis), i.max(axis=axis)),
            "bool sum": (xb.sum(axis=axis), b.sum(axis=axis)),
            "any": (dnp.any(~xb, axis=axis), np.any(~b, axis=axis)),
            "all": (dnp.all(xb, axis=axis), np.all(b, axis=axis)),
        }
    for name, (got, want) in checks.items():
        got = np.asarray(dnp.asnumpy(got))
        assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype, name
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_a_host_value_is_folded_on_the_caller_as_the_workers_fold(case):
    h = np.random.default_rng(3).standard_normal((6, 400))
    x = dnp.asarray(h, chunks=(3, 100))
    with dask.config.set({"array.chunk-size": "1KiB"}):  # (a host value in several blocks)
        m = x.sum(axis=0, keepdims=True)
        assert m.host_value is not None and m.numblocks[1] > 1
        s = h.sum(axis=0, keepdims=True)
        for got, want in ((m.max(axis=1), s.max(axis=1)), (m.sum(), s.sum()), (m.prod(axis=0), s.prod(axis=0))):
            np.testing.assert_allclose(dnp.asnumpy(got), want, rtol=1e-12)


def test_large_partials_are_folded_on_the_host(case):
    from dgvm.array._engine import packed

    h = np.random.default_rng(4).standard_normal((4, 300000))
    x = dnp.asarray(h, chunks=(1, 150000))  # each chunk's row sums: more than packed.PACKED
    assert 150000 * 8 > packed.PACKED
    np.testing.assert_allclose(dnp.asnumpy(x.sum(axis=0)), h.sum(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dnp.asnumpy(x.max(axis=0)), h.max(axis=0))


def test_float16_sums_are_folded_in_float32_as_numpy_adds_them(case):
    # In float16 a running total past 4096 rounds a partial of 6 to 4 or 8: 4000 chunks
    # folded one after another in float16 end far from NumPy's sum.
    h = (np.random.default_rng(5).random(200000) / 4).astype(np.float32)
    x = dnp.asarray(h, chunks=50)
    # Squares of 200000 standard normal values sum past 65504: NumPy's float16 variance is
    # inf (its mean's sum is not), and so is dgvm's, whose partials folded in float32.
    g = np.random.default_rng(6).standard_normal(200000).astype(np.float32)
    with np.errstate(over="ignore"):
        assert np.isinf(g.var(dtype=np.float16))
        assert np.isinf(float(dnp.asarray(g, chunks=50).var(dtype=np.float16)))
    for got, want in ((x.sum(dtype=np.float16), h.sum(dtype=np.float16)),
                      (x.mean(dtype=np.float16), h.mean(dtype=np.float16)),  # (200000: inf in float16)
                      (x.var(dtype=np.float16), h.var(dtype=np.float16))):
        got = np.asarray(dnp.asnumpy(got))
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float64), float(want), rtol=2e-3)
