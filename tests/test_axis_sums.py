"""Sums over a chunk's leading axes as a matrix-vector product (``_engine.axis_sums``, on
cuda), and every sum, mean and variance over leading or trailing axes against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import dgvm.array as dnp
from dgvm.array._engine import axis_sums
from dgvm.backends.cuda import gpu_count

# (shape, order, axes, dtype, summed as a product?)
CASES = [
    ((6, 5), "C", (0,), "float64", True),
    ((6, 5), "C", (0,), "float32", True),
    ((6, 5), "C", (0,), "complex128", True),
    ((4, 3, 5), "C", (0, 1), "float64", True),
    ((4, 3, 5), "F", (2,), "float64", True),
    ((4, 3, 5), "F", (1, 2), "complex64", True),
    ((6, 5), "C", (1,), "float64", False),  # (CuPy streams the contiguous axis already)
    ((6, 5), "C", (0, 1), "float64", False),  # a whole reduction
    ((4, 3, 5), "C", (1,), "float64", False),  # a middle axis
    ((4, 3, 5), "C", (0, 2), "float64", False),
    ((6, 5), "C", (0,), "int64", False),  # no BLAS product of integers
    ((6, 5), "C", (0,), ">f8", False),  # nor of another byte order
    ((1, 5), "C", (0,), "float64", False),  # one row: nothing to add
    ((0, 5), "C", (0,), "float64", False),
    ((6,), "C", (0,), "float64", False),
]


def rtol_of(dtype):
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


def chunk_of(shape, order, dtype, xp=np):
    h = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if h.dtype.kind == "c":
        h = h + 1j * h[::-1]
    return xp.asarray(np.asarray(h, order=order))


@pytest.mark.parametrize("shape,order,axes,dtype,product", CASES)
def test_a_chunk_is_summed_by_product_only_where_it_is_the_same_sum(shape, order, axes, dtype, product):
    a = chunk_of(shape, order, dtype)
    view = axis_sums.rows(a, axes, None)
    assert (view is not None) == product
    want = np.sum(a, axis=axes, keepdims=True)
    if product:
        matrix, _ = view
        assert np.shares_memory(matrix, a) and matrix.shape[0] == np.prod([shape[i] for i in axes])
        got = axis_sums.by_product(a, axes, *view, np)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol_of(a.dtype))
    # NumPy's chunks are summed by NumPy, as they were
    np.testing.assert_array_equal(axis_sums.sums(a, axes, None, np), want)


def test_a_sum_in_another_dtype_or_of_a_strided_view_is_not_a_product():
    a = chunk_of((6, 5), "C", "float32")
    assert axis_sums.rows(a, (0,), np.float64) is None  # (the product would sum in float32)
    assert axis_sums.rows(a, (0,), np.float32) is not None
    assert axis_sums.rows(a[::2], (0,), None) is None  # (a product would copy it first)


def data(dtype, shape=(120, 90)):
    h = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    if h.dtype.kind == "c":
        h = h + 1j * np.random.default_rng(8).standard_normal(shape)
    if h.dtype.kind == "f" and h.ndim == 2:
        h[5, 7], h[9, 11], h[10, 11] = np.nan, np.inf, -np.inf  # (column 11 sums to NaN)
    return h


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "int32"])
def test_sums_and_means_over_leading_and_trailing_axes_are_numpys(case, dtype):
    h = data(dtype)
    x = dnp.asarray(h, chunks=(40, 30))
    rtol = 1e-4 if dtype == "float32" else 1e-12
    with np.errstate(invalid="ignore"):  # (NumPy's own inf - inf, in the reference values)
        checks = {
            "sum(axis=0)": (x.sum(axis=0), h.sum(axis=0)),
            "mean(axis=0)": (x.mean(axis=0), h.mean(axis=0)),
            "sum(axis=0, keepdims)": (dnp.sum(x, axis=0, keepdims=True), h.sum(axis=0, keepdims=True)),
            "T.sum(axis=1)": (x.T.sum(axis=1), h.T.sum(axis=1)),  # (F-ordered chunks: a trailing axis)
            "T.sum(axis=0)": (x.T.sum(axis=0), h.T.sum(axis=0)),
            "sum(axis=1)": (x.sum(axis=1), h.sum(axis=1)),
        }
        if dtype != "complex128":
            checks["var(axis=0)"] = (x.var(axis=0), h.var(axis=0))
    for name, (got, want) in checks.items():
        got = dnp.asnumpy(got)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0 if dtype != "float32" else 1e-4, err_msg=name)


def test_a_three_dimensional_sum_over_its_two_leading_axes_is_numpys(case):
    h = data("float64", (12, 10, 9))
    x = dnp.asarray(h, chunks=(5, 4, 9))
    np.testing.assert_allclose(dnp.asnumpy(x.sum(axis=(0, 1))), h.sum(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(dnp.asnumpy(x.mean(axis=(1, 0), keepdims=True)),
                               h.mean(axis=(0, 1), keepdims=True), rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="no CUDA GPU visible")
@pytest.mark.parametrize("shape,order,axes,dtype,product", [c for c in CASES if c[3] != ">f8"])
def test_cupy_chunks_are_summed_by_product_where_it_is_the_same_sum(shape, order, axes, dtype, product):
    import cupy

    a = chunk_of(shape, order, dtype, cupy)
    assert (axis_sums.rows(a, axes, None) is not None) == product
    got = axis_sums.sums(a, axes, None, cupy)
    want = np.sum(cupy.asnumpy(a), axis=axes, keepdims=True)
    assert isinstance(got, cupy.ndarray) and got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=rtol_of(a.dtype))


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="no CUDA GPU visible")
def test_the_vector_of_ones_is_kept_per_dtype_up_to_its_length_and_made_past_it():
    import cupy

    for rows_, dtype in ((axis_sums.KEPT_ONES + 3, "float64"), (axis_sums.KEPT_ONES, "float32"), (7, "float32")):
        a = chunk_of((rows_, 3), "C", dtype, cupy)
        got = cupy.asnumpy(axis_sums.sums(a, (0,), None, cupy))
        np.testing.assert_allclose(got, np.sum(cupy.asnumpy(a), axis=0, keepdims=True), rtol=rtol_of(dtype) * 10)
    kept = axis_sums._ones[(cupy.cuda.Device().id, np.dtype("float32"))]
    assert kept.shape == (axis_sums.KEPT_ONES,) and bool((kept == 1).all())
