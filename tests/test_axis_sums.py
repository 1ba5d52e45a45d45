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
    ((4, 3, 5), "C", (0,), "complex64", True),
    ((4, 3, 5), "F", (2,), "float64", False),  # (chunks are C-ordered: CuPy's own then)
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
    matrix = axis_sums.rows(a, axes, None)
    assert (matrix is not None) == product
    if product:
        assert np.shares_memory(matrix, a) and matrix.shape[0] == np.prod([shape[i] for i in axes])
        assert matrix.dtype.kind == "f"  # (a complex chunk: its real and imaginary parts)
        want = np.sum(a, axis=axes, keepdims=True)
        got = axis_sums.by_product(a, axes, matrix, np)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol_of(a.dtype))


def complex_with_infinities(xp=np):
    h = np.arange(30, dtype=np.complex128).reshape(6, 5) * (1 - 2j)
    h[0, 0], h[1, 1], h[2, 2], h[3, 3] = np.inf, complex(0, -np.inf), np.nan, complex(1, np.nan)
    return xp.asarray(h)


def assert_same_complex(got, want):
    # (each part on its own: inf + 0j is not inf + nanj, which allclose may not tell)
    np.testing.assert_array_equal(np.real(got), np.real(want))
    np.testing.assert_array_equal(np.imag(got), np.imag(want))


def test_complex_infinities_and_nans_sum_as_numpys_through_the_product():
    a = complex_with_infinities()
    matrix = axis_sums.rows(a, (0,), None)
    assert_same_complex(axis_sums.by_product(a, (0,), matrix, np), np.sum(a, axis=0, keepdims=True))


def test_a_sum_in_another_dtype_or_of_a_strided_view_is_not_a_product():
    a = chunk_of((6, 5), "C", "float32")
    assert axis_sums.rows(a, (0,), np.float64) is None  # (the product would sum in float32)
    assert axis_sums.rows(a, (0,), np.float32) is not None
    assert axis_sums.rows(a[::2], (0,), None) is None  # (a product would copy it first)
    assert axis_sums.rows(np.asfortranarray(a), (1,), None) is None


def data(dtype, shape=(120, 90)):
    h = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    if h.dtype.kind == "c":
        h = h + 1j * np.random.default_rng(8).standard_normal(shape)
        h[9, 11], h[20, 13] = np.inf, complex(0, -np.inf)  # (each column's sum keeps them)
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
            "T.sum(axis=1)": (x.T.sum(axis=1), h.T.sum(axis=1)),  # (a view: reduced from its copy)
            "T.sum(axis=0)": (x.T.sum(axis=0), h.T.sum(axis=0)),
            "sum(axis=1)": (x.sum(axis=1), h.sum(axis=1)),
        }
        if dtype != "complex128":
            checks["var(axis=0)"] = (x.var(axis=0), h.var(axis=0))
    for name, (got, want) in checks.items():
        got = dnp.asnumpy(got)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        for part in (np.real, np.imag):  # (inf + 0j is not inf + nanj)
            np.testing.assert_allclose(part(got), part(want), rtol=rtol,
                                       atol=0 if dtype != "float32" else 1e-4, err_msg=name)


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
def test_cupy_complex_infinities_and_nans_sum_as_numpys():
    import cupy

    a = complex_with_infinities(cupy)
    assert axis_sums.rows(a, (0,), None) is not None
    assert_same_complex(cupy.asnumpy(axis_sums.sums(a, (0,), None, cupy)), np.sum(cupy.asnumpy(a), axis=0, keepdims=True))


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="no CUDA GPU visible")
def test_float32_is_not_summed_by_product_when_cupy_multiplies_in_tf32():
    import cupy
    from cupy._core import _routines_linalg as linalg

    if cupy.cuda.Device().compute_capability < "80":
        pytest.skip("TF32 needs compute capability 8.0")
    a = chunk_of((6, 5), "C", "float32", cupy)
    before = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)
    try:
        assert not axis_sums._exact_products(np.dtype(np.float32))
        got = cupy.asnumpy(axis_sums.sums(a, (0,), None, cupy))
    finally:
        linalg.set_compute_type(np.float32, before)
    assert axis_sums._exact_products(np.dtype(np.float32)) == (before in (linalg.COMPUTE_TYPE_DEFAULT, linalg.COMPUTE_TYPE_PEDANTIC))
    np.testing.assert_allclose(got, cupy.asnumpy(a).sum(axis=0, keepdims=True), rtol=1e-6)


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
