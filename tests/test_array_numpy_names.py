"""NumPy's names and call forms in dgvm.array against NumPy itself: reductions with
positional ``axis``/``dtype``, the ``nan*`` reductions, running sums and products,
``diff``, closeness tests, histograms, ``isin``/``unique``, order statistics, ``average``,
``cov``/``corrcoef``; over shapes, chunkings, dtypes, negative axes, keepdims and NaNs;
their errors; and that none of them gathers its array to the caller."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.client.allocation import AllocationHandle

# (shape, chunks): one block, uneven blocks, several blocks along every axis.
CASES = [((11,), (4,)), ((7, 5), (3, 2)), ((4, 6, 5), (3, 6, 2)), ((6, 4), (6, 4))]


def same(got, want, rtol=1e-6):
    """``got`` (DArrays, or tuples of them) has NumPy's shape, dtype and values."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            same(g, w, rtol)
        return
    got = dnp.asnumpy(got) if isinstance(got, dnp.DArray) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "fc":
        if want.dtype in (np.float32, np.complex64):
            rtol = max(rtol, 2e-5)
        scale = np.nanmax(np.abs(want)) if want.size and not np.isnan(want).all() else 1.0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def sample(shape, dtype, seed=0, nans=False):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == bool:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -9, 10, size=shape).astype(dtype)
    a = rng.standard_normal(shape).astype(dtype)
    if nans:
        a[rng.random(shape) < 0.2] = np.nan
        if a.ndim > 1:
            a[(0,) * (a.ndim - 1)] = np.nan  # a slice of NaNs only
    return a


def quiet():
    """NumPy's warnings (empty slices, NaN slices) are not under test here."""
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore")
    return w


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_reductions_take_numpy_call_forms(case, dtype):
    for shape, chunks in CASES:
        a = sample(shape, dtype)
        x = dnp.from_numpy(a, chunks=chunks)
        last = a.ndim - 1
        same(dnp.sum(x, 0), np.sum(a, 0))
        same(dnp.sum(x, -1, np.int64 if dtype == "int32" else np.float64, keepdims=True),
             np.sum(a, -1, np.int64 if dtype == "int32" else np.float64, keepdims=True))
        both = tuple(sorted({0, last}))
        same(dnp.prod(x, both), np.prod(a, both))
        same(dnp.mean(x, -1, np.float32), np.mean(a, -1, np.float32))
        same(dnp.mean(x, 0), np.mean(a, 0))
        same(dnp.var(x, 0, ddof=1), np.var(a, 0, ddof=1))
        same(dnp.std(x, -1, correction=1, keepdims=True), np.std(a, -1, ddof=1, keepdims=True))
        same(dnp.var(x, None, np.float32), np.var(a, None, np.float32), rtol=1e-4)
        for fn in ("max", "min", "amax", "amin"):
            same(getattr(dnp, fn)(x, -1, keepdims=True), getattr(np, fn)(a, -1, keepdims=True))
            same(getattr(dnp, fn)(x, 0), getattr(np, fn)(a, 0))
        same(dnp.all(x, 0), np.all(a, 0))
        same(dnp.any(x, -1, keepdims=True), np.any(a, -1, keepdims=True))
        same(dnp.argmax(x, -1), np.argmax(a, -1))
        same(dnp.argmin(x, 0, keepdims=True), np.argmin(a, 0, keepdims=True))
        same(dnp.count_nonzero(x, -1), np.count_nonzero(a, -1))
    with pytest.raises(ValueError, match="ddof and correction"):
        dnp.var(x, 0, ddof=1, correction=1)
    with pytest.raises(np.exceptions.AxisError):
        dnp.sum(x, 2)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_nan_reductions(case, dtype):
    w = quiet()
    for shape, chunks in CASES:
        a = sample(shape, dtype, 1, nans=True)
        x = dnp.from_numpy(a, chunks=chunks)
        for axis, keepdims in ((None, False), (0, False), (-1, True), (tuple(range(a.ndim)), True)):
            same(dnp.nansum(x, axis, keepdims=keepdims), np.nansum(a, axis, keepdims=keepdims))
            same(dnp.nanmean(x, axis, keepdims=keepdims), np.nanmean(a, axis, keepdims=keepdims))
            same(dnp.nanmax(x, axis, keepdims=keepdims), np.nanmax(a, axis, keepdims=keepdims))
            same(dnp.nanmin(x, axis, keepdims=keepdims), np.nanmin(a, axis, keepdims=keepdims))
        same(dnp.nansum(x, -1, np.float64), np.nansum(a, -1, np.float64))
        same(dnp.nanmean(x, 0, np.float64), np.nanmean(a, 0, np.float64))
    w.__exit__(None, None, None)
    if dtype != "int64":
        x = dnp.from_numpy(sample((5, 4), dtype, 2, nans=True), chunks=(2, 3))  # row 0: NaNs only
        with pytest.warns(RuntimeWarning, match="All-NaN slice"):
            dnp.nanmax(x, 1)
        with pytest.warns(RuntimeWarning, match="Mean of empty slice"):
            dnp.nanmean(x, 1)
        with pytest.raises(TypeError, match="inexact"):
            dnp.nanmean(x, 0, np.int64)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint32", "float32", "float64", "complex128"])
def test_running_sums_and_products(case, dtype):
    for shape, chunks in CASES:
        a = sample(shape, dtype, 3)
        if np.dtype(dtype).kind in "fc":
            a = (a / 4 + 1).astype(dtype)  # products that neither vanish nor overflow
        x = dnp.from_numpy(a, chunks=chunks)
        for axis in (None, 0, -1):
            same(dnp.cumsum(x, axis), np.cumsum(a, axis))
            same(dnp.cumprod(x, axis), np.cumprod(a, axis))
        same(dnp.cumsum(x, -1, np.float64), np.cumsum(a, -1, np.float64))
        same(dnp.cumprod(x, 0, dtype=np.int64 if dtype != "complex128" else None),
             np.cumprod(a, 0, dtype=np.int64 if dtype != "complex128" else None))
    zero_d = dnp.from_numpy(np.asarray(a.reshape(-1)[0]))
    same(dnp.cumsum(zero_d), np.cumsum(a.reshape(-1)[0]))
    with pytest.raises(np.exceptions.AxisError):
        dnp.cumsum(x, 2)


def test_nancumsum(case):
    for shape, chunks in CASES:
        for dtype in ("float32", "float64", "int16"):
            a = sample(shape, dtype, 4, nans=True)
            x = dnp.from_numpy(a, chunks=chunks)
            for axis in (None, 0, -1):
                same(dnp.nancumsum(x, axis), np.nancumsum(a, axis))


def test_diff(case):
    for shape, chunks in CASES:
        for dtype in ("uint8", "float64", "bool"):
            a = sample(shape, dtype, 5)
            x = dnp.from_numpy(a, chunks=chunks)
            for n in (0, 1, 3):
                same(dnp.diff(x, n), np.diff(a, n))
                same(dnp.diff(x, n, 0), np.diff(a, n, 0))
            same(dnp.diff(x, 1, -1, prepend=0), np.diff(a, 1, -1, prepend=0))
            edge = a.take([0], axis=0)
            same(dnp.diff(x, 2, axis=0, prepend=dnp.from_numpy(edge), append=edge),
                 np.diff(a, 2, axis=0, prepend=edge, append=edge))
            same(dnp.diff(x, shape[-1] + 2), np.diff(a, shape[-1] + 2))  # no elements left
    with pytest.raises(ValueError, match="non-negative"):
        dnp.diff(x, -1)
    with pytest.raises(TypeError):
        dnp.diff(x, 1.5)
    with pytest.raises(np.exceptions.AxisError):
        dnp.diff(x, 1, 2)
    with pytest.raises(ValueError, match="at least one dimensional"):
        dnp.diff(dnp.from_numpy(np.asarray(1.0)))


def test_absolute_power_isclose_allclose_array_equal(case):
    a = sample((7, 5), "float64", 6)
    a[0, :3] = [np.nan, np.inf, -np.inf]
    b = a + np.random.default_rng(0).standard_normal(a.shape) * 1e-7
    b[0, :3] = [np.nan, np.inf, np.inf]
    x, y = dnp.from_numpy(a, chunks=(3, 2)), dnp.from_numpy(b, chunks=(4, 5))
    i = dnp.from_numpy(sample((7, 5), "int32", 7), chunks=(2, 2))
    ia = dnp.asnumpy(i)
    same(dnp.absolute(x), np.absolute(a))
    same(dnp.absolute(i), np.absolute(ia))
    same(dnp.power(x, 2), np.power(a, 2))
    same(dnp.power(i, 3), np.power(ia, 3))
    same(dnp.power(2.0, i), np.power(2.0, ia))
    for kw in ({}, {"equal_nan": True}, {"rtol": 0, "atol": 1e-6}, {"rtol": 1e-9}):
        same(dnp.isclose(x, y, **kw), np.isclose(a, b, **kw))
        same(dnp.allclose(x, y, **kw), np.allclose(a, b, **kw))
    same(dnp.isclose(x, 1.0), np.isclose(a, 1.0))
    same(dnp.isclose(x, np.inf), np.isclose(a, np.inf))
    same(dnp.isclose(x, np.nan, equal_nan=True), np.isclose(a, np.nan, equal_nan=True))
    same(dnp.isclose(0.5, x), np.isclose(0.5, a))
    same(dnp.isclose(i, 3), np.isclose(ia, 3))
    same(dnp.isclose(x, y[0]), np.isclose(a, b[0]))  # broadcast
    same(dnp.allclose(i, i), np.allclose(ia, ia))
    for kw in ({}, {"equal_nan": True}):
        same(dnp.array_equal(x, x, **kw), np.array_equal(a, a, **kw))
        same(dnp.array_equal(x, y, **kw), np.array_equal(a, b, **kw))
        same(dnp.array_equal(i, i, **kw), np.array_equal(ia, ia, **kw))
    same(dnp.array_equal(x, x[:3]), np.array_equal(a, a[:3]))
    same(dnp.array_equal(x[0, 3], a[0, 3]), np.array_equal(a[0, 3], a[0, 3]))
    assert bool(dnp.allclose(x[1:], x[1:] * (1 + 1e-9)))
    with pytest.raises(TypeError, match="at least one DArray"):
        dnp.isclose(1.0, 1.0)
    with pytest.raises(TypeError, match="b must be a DArray or a scalar"):
        dnp.isclose(x, [1.0, 2.0])
    with pytest.raises(TypeError, match="rtol"):
        dnp.isclose(x, y, rtol="tight")
    with pytest.raises(ValueError, match="broadcast"):
        dnp.isclose(x, x[:, :2])


def test_bincount(case):
    rng = np.random.default_rng(8)
    for n, chunks in ((1, 1), (40, 7), (40, 40)):
        for dtype in ("int64", "uint8", "int16", "bool"):
            a = rng.integers(0, 12, n).astype(dtype)
            w = rng.standard_normal(n)
            x = dnp.from_numpy(a, chunks=chunks)
            same(dnp.bincount(x), np.bincount(a))
            same(dnp.bincount(x, minlength=20), np.bincount(a, minlength=20))
            same(dnp.bincount(x, dnp.from_numpy(w, chunks=5)), np.bincount(a, w))
            same(dnp.bincount(x, w.astype(np.float32), 3), np.bincount(a, w.astype(np.float32), 3))
    x = dnp.from_numpy(np.array([3, -1, 2]), chunks=2)
    with pytest.raises(ValueError, match="no negative elements"):
        dnp.bincount(x)
    with pytest.raises(TypeError, match="integer dtype"):
        dnp.bincount(dnp.from_numpy(np.arange(3.0)))
    with pytest.raises(TypeError, match="integer dtype"):
        dnp.bincount(dnp.from_numpy(np.arange(3, dtype=np.uint64)))
    with pytest.raises(ValueError, match="1-d"):
        dnp.bincount(dnp.from_numpy(np.zeros((2, 2), np.int64)))
    y = dnp.from_numpy(np.arange(3))
    with pytest.raises(ValueError, match="minlength"):
        dnp.bincount(y, minlength=-1)
    with pytest.raises(ValueError, match="do not match"):
        dnp.bincount(y, np.ones(4))
    with pytest.raises(TypeError, match="float64"):
        dnp.bincount(y, np.ones(3, complex))


def test_histogram(case):
    edges = [-2, -0.5, 0, 0, 1, 3]  # a value on an edge goes right; the last edge is in
    for (shape, chunks), dtype in zip(CASES, ("float64", "float32", "int32", "float64")):
        a = sample(shape, dtype, 9)
        x = dnp.from_numpy(a, chunks=chunks)
        same(dnp.histogram(x), np.histogram(a))
        same(dnp.histogram(x, 4, density=True), np.histogram(a, 4, density=True))
        same(dnp.histogram(x, 3, range=(-1, 1)), np.histogram(a, 3, range=(-1, 1)))
        same(dnp.histogram(x, edges), np.histogram(a, edges))
        same(dnp.histogram(x, dnp.from_numpy(np.array(edges), chunks=4), density=True),
             np.histogram(a, edges, density=True))
    for wt in ("float32", "int8", "complex128"):
        w = sample(shape, wt, 10)
        same(dnp.histogram(x, 5, weights=dnp.from_numpy(w, chunks=chunks)), np.histogram(a, 5, weights=w))
        same(dnp.histogram(x, edges, weights=w), np.histogram(a, edges, weights=w))
    a = np.array([0.0, 1.0, 1.0, 2.0, np.nan, 5.0, -1.0])
    x = dnp.from_numpy(a, chunks=3)
    same(dnp.histogram(x, 2, range=(0, 2)), np.histogram(a, 2, range=(0, 2)))  # NaN, outside: not counted
    same(dnp.histogram(dnp.full(5, 3.0), 2), np.histogram(np.full(5, 3.0), 2))  # one value: +-0.5
    with pytest.raises(ValueError, match="not finite"):
        dnp.histogram(x)
    with pytest.raises(ValueError, match="must be positive"):
        dnp.histogram(x, 0, range=(0, 1))
    with pytest.raises(ValueError, match="max must be larger than min"):
        dnp.histogram(x, 3, range=(2, 1))
    with pytest.raises(ValueError, match="monotonically"):
        dnp.histogram(x, [0, 2, 1])
    with pytest.raises(ValueError, match="monotonically"):
        dnp.histogram(x, dnp.from_numpy(np.array([0.0, 2.0, 1.0])))
    with pytest.raises(ValueError, match="same shape"):
        dnp.histogram(x, 3, range=(0, 1), weights=np.ones(3))
    with pytest.raises(dgvm.NotSupported, match="estimator"):
        dnp.histogram(x, "auto")


def test_digitize(case):
    for shape, chunks in CASES:
        a = sample(shape, "float64", 11) * 2
        a.reshape(-1)[:3] = [np.nan, 1.0, -1.0]  # on an edge
        x = dnp.from_numpy(a, chunks=chunks)
        for bins in ([-1.0, 0.0, 1.0, 2.5], [3, 1, 0, -1], [0.5], [1, 1, 2]):
            for right in (False, True):
                same(dnp.digitize(x, bins, right), np.digitize(a, bins, right))
        bins = np.array([-1.0, 0.0, 1.0])
        same(dnp.digitize(x, dnp.from_numpy(bins, chunks=2)), np.digitize(a, bins))
        i = sample(shape, "int32", 12)
        same(dnp.digitize(dnp.from_numpy(i, chunks=chunks), [0, 2, 4]), np.digitize(i, [0, 2, 4]))
    with pytest.raises(ValueError, match="monotonically"):
        dnp.digitize(x, [0, 2, 1])
    with pytest.raises(ValueError, match="1-d"):
        dnp.digitize(x, [[0, 1]])
    with pytest.raises(TypeError, match="complex"):
        dnp.digitize(dnp.from_numpy(np.ones(3, complex)), [0, 1])


def test_isin(case):
    rng = np.random.default_rng(13)
    for shape, chunks in CASES:
        a = sample(shape, "int64", 14)
        x = dnp.from_numpy(a, chunks=chunks)
        t = rng.integers(-5, 5, 9)
        same(dnp.isin(x, t), np.isin(a, t))
        same(dnp.isin(x, dnp.from_numpy(t, chunks=2), invert=True), np.isin(a, t, invert=True))
        same(dnp.isin(x, 3), np.isin(a, 3))
        same(dnp.isin(x, []), np.isin(a, []))
        same(dnp.isin(x, [1.0, 2.5]), np.isin(a, [1.0, 2.5]))  # compared in the common dtype
        f = a.astype(np.float64)
        f.reshape(-1)[:3] = [np.nan, -0.0, 0.0]
        tf = np.array([np.nan, 0.0, 1.0, 4.0, -7.0])
        same(dnp.isin(dnp.from_numpy(f, chunks=chunks), dnp.from_numpy(tf.reshape(5, 1), chunks=2)),
             np.isin(f, tf))  # NaN is never in; -0.0 is 0.0
    with pytest.raises(ValueError, match="kind"):
        dnp.isin(x, t, kind="hash")
    with pytest.raises(TypeError, match="test_elements"):
        dnp.isin(x, ["a", 1])


def test_unique_numpy_form(case):
    a = np.array([[3.0, np.nan, 1.0, 3.0], [np.nan, -0.0, 0.0, 1.0], [2.0, 3.0, np.nan, 7.0]])
    x = dnp.from_numpy(a, chunks=(2, 3))
    same(dnp.unique(x), np.unique(a))
    flags = dict(return_index=True, return_inverse=True, return_counts=True)
    for equal_nan in (True, False):
        same(dnp.unique(x, **flags, equal_nan=equal_nan), np.unique(a, **flags, equal_nan=equal_nan))
    same(dnp.unique(x, return_counts=True), np.unique(a, return_counts=True))
    same(dnp.unique(x, False, True), np.unique(a, False, True))
    i = sample((9, 4), "int16", 15)
    same(dnp.unique(dnp.from_numpy(i, chunks=(4, 3)), **flags), np.unique(i, **flags))
    with pytest.raises(dgvm.NotSupported, match="axis"):
        dnp.unique(x, axis=0)


def test_median_percentile_quantile(case):
    w = quiet()
    for (shape, chunks), dtype in [*zip(CASES, ["float64"] * 4), (CASES[1], "int32"), (CASES[2], "uint8")]:
        a = sample(shape, dtype, 16, nans=dtype == "float64" and len(shape) > 1)
        x = dnp.from_numpy(a, chunks=chunks)
        axes = [None, -1] + ([(0, 2)] if a.ndim > 2 else [(0, -1)] if a.ndim > 1 else [])
        for axis in axes:
            same(dnp.median(x, axis), np.median(a, axis))
            same(dnp.quantile(x, 0.3, axis), np.quantile(a, 0.3, axis))
            q = [0, 25, 50, 99.5, 100]
            same(dnp.percentile(x, q, axis), np.percentile(a, q, axis))
        same(dnp.median(x, 0, keepdims=True), np.median(a, 0, keepdims=True))
        same(dnp.quantile(x, [0.5, 0.1], -1, keepdims=True), np.quantile(a, [0.5, 0.1], -1, keepdims=True))
    w.__exit__(None, None, None)


def test_quantile_forms_of_q_dtypes_and_errors(case):
    w = quiet()
    for dtype in ("float64", "float32"):
        a = sample((7, 5), dtype, 16, nans=True)
        x = dnp.from_numpy(a, chunks=(3, 2))
        for axis in (None, 1):  # a Python float promotes weakly, NumPy's float64 strongly
            same(dnp.quantile(x, 0.75, axis), np.quantile(a, 0.75, axis))
            same(dnp.quantile(x, np.float64(0.75), axis), np.quantile(a, np.float64(0.75), axis))
        same(dnp.quantile(x[1:], np.float64(0.75)), np.quantile(a[1:], np.float64(0.75)))
        same(dnp.quantile(x, [[0.1, 0.9], [0.5, 0.6]], 0), np.quantile(a, [[0.1, 0.9], [0.5, 0.6]], 0))
        same(dnp.quantile(x, 1, 0), np.quantile(a, 1, 0))  # a whole rank: a's dtype
        same(dnp.quantile(x, 0, 1, keepdims=True), np.quantile(a, 0, 1, keepdims=True))
        same(dnp.percentile(x, 50, 0), np.percentile(a, 50, 0))
        same(dnp.percentile(x, dnp.from_numpy(np.array([10.0, 90.0])), 0), np.percentile(a, [10.0, 90.0], 0))
    w.__exit__(None, None, None)
    a = np.array([1.0, np.inf, 3.0, -np.inf, 2.0, 2.0])
    x = dnp.from_numpy(a, chunks=4)
    for q in (0.0, 0.2, 0.5, 0.9, 1.0):
        same(dnp.quantile(x, q), np.quantile(a, q))
    same(dnp.median(x), np.median(a))
    same(dnp.quantile(x, []), np.quantile(a, []))
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        dnp.percentile(x, 101)
    with pytest.raises(ValueError, match=r"Quantiles must be in the range \[0, 1\]"):
        dnp.quantile(x, [0.5, -0.1])
    with pytest.raises(ValueError, match="not a valid method"):
        dnp.quantile(x, 0.5, method="middle")
    with pytest.raises(dgvm.NotSupported, match="method='nearest'"):
        dnp.quantile(x, 0.5, method="nearest")
    with pytest.raises(TypeError, match="real numbers"):
        dnp.quantile(dnp.from_numpy(np.ones(3, complex)), 0.5)
    with pytest.raises(ValueError, match="scalar or 1d"):
        dnp.quantile(x, np.full((1, 1, 1), 0.5))
    with pytest.raises(np.exceptions.AxisError):
        dnp.median(x, 1)


def test_median_of_complex_and_of_one_element(case):
    c = sample((6, 5), "complex128", 17)
    same(dnp.median(dnp.from_numpy(c, chunks=(4, 2)), 0), np.median(c, 0))
    same(dnp.median(dnp.from_numpy(np.array(3))), np.median(np.array(3)))  # 0-d: mean's dtype
    one = sample((1, 3), "float64", 18)
    same(dnp.median(dnp.from_numpy(one), 0), np.median(one, 0))
    same(dnp.quantile(dnp.from_numpy(one), [0.2, 0.7], 0), np.quantile(one, [0.2, 0.7], 0))


def test_average(case):
    for shape, chunks in CASES:
        for dtype in ("int32", "float32", "float64"):
            a = sample(shape, dtype, 19)
            x = dnp.from_numpy(a, chunks=chunks)
            w = np.abs(sample(shape, "float64", 20)) + 0.1
            same(dnp.average(x), np.average(a))
            same(dnp.average(x, 0, returned=True), np.average(a, 0, returned=True))
            same(dnp.average(x, None, dnp.from_numpy(w, chunks=chunks), True),
                 np.average(a, None, w, True))
            same(dnp.average(x, -1, dnp.from_numpy(w[(0,) * (a.ndim - 1)]), keepdims=True),
                 np.average(a, -1, w[(0,) * (a.ndim - 1)], keepdims=True))
            wi = np.arange(1, shape[0] + 1, dtype=np.int8)
            same(dnp.average(x, 0, dnp.from_numpy(wi), True), np.average(a, 0, wi, True))
    x = dnp.from_numpy(sample((4, 3), "float64", 21), chunks=2)
    with pytest.raises(TypeError, match="axis must be given"):
        dnp.average(x, weights=dnp.from_numpy(np.ones(3)))
    with pytest.raises(ValueError, match="not consistent"):
        dnp.average(x, 0, dnp.from_numpy(np.ones(3)))
    with pytest.raises(ZeroDivisionError, match="sum to zero"):
        dnp.average(x, 0, dnp.from_numpy(np.array([1.0, -1.0, 0.0, 0.0])))
    with pytest.raises(TypeError, match="weights must be a DArray"):
        dnp.average(x, 0, [1, 2, 3, 4])


def test_cov_and_corrcoef(case):
    for dtype in ("float64", "int16", "complex128"):
        m = sample((4, 9), dtype, 22)
        y = sample((2, 9), dtype, 23)
        z = sample((4, 3), dtype, 24)  # variables in columns: as many observations as m
        x = dnp.from_numpy(m, chunks=(3, 4))
        same(dnp.cov(x), np.cov(m))
        same(dnp.cov(x, rowvar=False), np.cov(m, rowvar=False))
        same(dnp.cov(x, dnp.from_numpy(y, chunks=(2, 5))), np.cov(m, y))
        same(dnp.corrcoef(x), np.corrcoef(m))
        same(dnp.corrcoef(x, dnp.from_numpy(z, chunks=2), rowvar=False), np.corrcoef(m, z, rowvar=False))
    m = m.real
    x = dnp.from_numpy(m, chunks=(3, 4))
    same(dnp.cov(x, bias=True), np.cov(m, bias=True))
    same(dnp.cov(x, ddof=3), np.cov(m, ddof=3))
    same(dnp.cov(x, dtype=np.float32), np.cov(m, dtype=np.float32), rtol=1e-4)
    f, aw = np.array([1, 2, 1, 3, 1, 1, 2, 1, 4]), np.linspace(0.5, 2, 9)
    same(dnp.cov(x, fweights=f), np.cov(m, fweights=f))
    same(dnp.cov(x, aweights=dnp.from_numpy(aw, chunks=4), ddof=0), np.cov(m, aweights=aw, ddof=0))
    same(dnp.cov(x, fweights=dnp.from_numpy(f), aweights=aw), np.cov(m, fweights=f, aweights=aw))
    same(dnp.cov(x[0]), np.cov(m[0]))  # one variable: 0-d
    same(dnp.cov(x[0], x[1]), np.cov(m[0], m[1]))
    same(dnp.corrcoef(x[1]), np.corrcoef(m[1]))
    with pytest.raises(ValueError, match="more than 2 dimensions"):
        dnp.cov(dnp.from_numpy(np.ones((2, 2, 2))))
    with pytest.raises(TypeError, match="fweights must be integer"):
        dnp.cov(x, fweights=np.full(9, 1.5))
    with pytest.raises(ValueError, match="aweights cannot be negative"):
        dnp.cov(x, aweights=-np.ones(9))
    with pytest.raises(RuntimeError, match="incompatible numbers of samples"):
        dnp.cov(x, fweights=np.ones(4, int))
    with pytest.raises(ValueError, match="observations"):
        dnp.cov(x, dnp.from_numpy(np.ones((2, 3))))
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"):
        dnp.cov(x, ddof=9)


def test_numpy_functions_given_darrays_run_distributed(case):
    a = sample((6, 5), "float64", 24, nans=True)
    x = dnp.from_numpy(a, chunks=(4, 2))
    b = sample((6, 5), "float64", 25)
    y = dnp.from_numpy(b, chunks=(2, 5))
    same(np.median(y, axis=0), np.median(b, axis=0))
    same(np.percentile(y, [5, 95], axis=1), np.percentile(b, [5, 95], axis=1))
    same(np.nanmean(x, 0), np.nanmean(a, 0))
    same(np.nanmax(x, axis=1), np.nanmax(a, axis=1))
    same(np.cumsum(y), np.cumsum(b))
    same(np.cumprod(y, axis=1), np.cumprod(b, axis=1))
    same(np.diff(y, axis=0), np.diff(b, axis=0))
    same(np.histogram(y, bins=4), np.histogram(b, bins=4))
    same(np.isclose(y, 0.5), np.isclose(b, 0.5))
    same(np.cov(y), np.cov(b))
    same(np.average(y, axis=0), np.average(b, axis=0))
    assert isinstance(np.median(y), dnp.DArray)


def test_none_gathers_its_array_to_the_caller(case, monkeypatch):
    """Each function reads, on the caller, at most a few elements of arrays of 4000."""
    read = []
    get = AllocationHandle.get

    def counted(self, pieces):
        read.append(sum(n for _, _, n in pieces))
        return get(self, pieces)

    monkeypatch.setattr(AllocationHandle, "get", counted)
    rng = np.random.default_rng(26)
    a = rng.standard_normal((40, 100))
    x = dnp.from_numpy(a, chunks=(10, 25))
    v = dnp.from_numpy(a.reshape(-1), chunks=500)
    i = dnp.from_numpy(rng.integers(0, 50, 4000), chunks=500)
    calls = {
        "sum": lambda: dnp.sum(x, 0), "nanmax": lambda: dnp.nanmax(x, -1),
        "nanmean": lambda: dnp.nanmean(x, 0), "cumsum": lambda: dnp.cumsum(x),
        "cumprod": lambda: dnp.cumprod(x, 1), "diff": lambda: dnp.diff(x, 2, prepend=0),
        "isclose": lambda: dnp.isclose(x, 0.5), "allclose": lambda: dnp.allclose(x, x),
        "array_equal": lambda: dnp.array_equal(x, x), "bincount": lambda: dnp.bincount(i, v),
        "histogram": lambda: dnp.histogram(x, 20), "digitize": lambda: dnp.digitize(x, [-1, 0, 1]),
        "isin": lambda: dnp.isin(x, v), "unique_inverse": lambda: dnp.unique(i, return_inverse=True),
        "median": lambda: dnp.median(x), "quantile": lambda: dnp.quantile(x, [0.1, 0.5], 0),
        "average": lambda: dnp.average(x, 1, dnp.ones(100), True), "cov": lambda: dnp.cov(x),
        "corrcoef": lambda: dnp.corrcoef(x, rowvar=False),
    }
    for name, call in calls.items():
        read.clear()
        result = call()
        for r in result if isinstance(result, tuple) else (result,):
            r.wait()
        assert sum(read) <= 64, f"{name} read {sum(read)} bytes of its arrays on the caller"
