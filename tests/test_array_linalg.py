"""The standard's linalg extension against NumPy: factorizations, inverses and solves
run once per matrix where its stack chunk lives; diagonals read only the blocks the
diagonal crosses; cross products and powers are distributed operations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import dgvm.array as dnp
from test_array_api import SETTINGS, same

DTYPES = ["float32", "float64", "complex64", "complex128"]


def tol(dtype):
    return 2e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9


def close(got, want, dtype):
    got = dnp.asnumpy(got)
    assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype, (got.shape, got.dtype)
    np.testing.assert_allclose(got, want, rtol=tol(dtype), atol=tol(dtype))


def hermitian(rng, batch, n, dtype):
    """Well-conditioned Hermitian positive-definite matrices."""
    a = rng.standard_normal(batch + (n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(batch + (n, n))
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


@st.composite
def stacks(draw, square=True):
    batch = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
    m = draw(st.integers(1, 6))
    n = m if square else draw(st.integers(1, 6))
    shape = batch + (m, n)
    chunks = tuple(draw(st.integers(1, s)) for s in shape)
    return batch, m, n, chunks, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))


@SETTINGS
@given(stack=stacks())
def test_square_matrix_functions_match_numpy(case, stack):
    batch, n, _, chunks, dtype, seed = stack
    rng = np.random.default_rng(seed)
    a = hermitian(rng, batch, n, dtype)
    x = dnp.from_numpy(a, chunks=chunks)
    close(dnp.linalg.inv(x), np.linalg.inv(a), dtype)
    close(dnp.linalg.det(x), np.linalg.det(a), dtype)
    close(dnp.linalg.cholesky(x), np.linalg.cholesky(a), dtype)
    close(dnp.linalg.cholesky(x, upper=True), np.linalg.cholesky(a, upper=True), dtype)
    sign, logdet = dnp.linalg.slogdet(x)
    want = np.linalg.slogdet(a)
    close(sign, want.sign, dtype)
    close(logdet, want.logabsdet, dtype)
    w, v = dnp.linalg.eigh(x)
    close(w, np.linalg.eigvalsh(a), dtype)
    close(dnp.linalg.eigvalsh(x), np.linalg.eigvalsh(a), dtype)
    v = dnp.asnumpy(v)  # eigenvectors are defined up to a phase: check a V = V w
    close(dnp.asarray(a @ v), v * dnp.asnumpy(w)[..., None, :], dtype)
    rhs = rng.standard_normal(batch + (n, 2)).astype(dtype)
    close(dnp.linalg.solve(x, dnp.from_numpy(rhs)), np.linalg.solve(a, rhs), dtype)
    vec = rng.standard_normal(n).astype(dtype)
    close(dnp.linalg.solve(x, dnp.from_numpy(vec)), np.linalg.solve(a, vec), dtype)
    for p in (0, 1, 2, 3, -1):
        close(dnp.linalg.matrix_power(x, p), np.linalg.matrix_power(a, p), dtype)


@SETTINGS
@given(stack=stacks(square=False), full=st.booleans(), mode=st.sampled_from(["reduced", "complete"]))
def test_rectangular_matrix_functions_match_numpy(case, stack, full, mode):
    """``full_matrices`` of svd and ``mode`` of qr are drawn with the matrices: each example
    runs one svd and one qr, and over the examples each form meets every kind of stack."""
    batch, m, n, chunks, dtype, seed = stack
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (m, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(batch + (m, n))
    a = a.astype(dtype)
    x = dnp.from_numpy(a, chunks=chunks)
    close(dnp.linalg.svdvals(x), np.linalg.svd(a, compute_uv=False), dtype)
    u, s, vh = (dnp.asnumpy(r) for r in dnp.linalg.svd(x, full_matrices=full))
    want = np.linalg.svd(a, full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (want.U.shape, want.S.shape, want.Vh.shape)
    assert (u.dtype, s.dtype, vh.dtype) == (want.U.dtype, want.S.dtype, want.Vh.dtype)
    k = min(m, n)
    close(dnp.asarray((u[..., :k] * s[..., None, :]) @ vh[..., :k, :]), a, dtype)
    q, r = (dnp.asnumpy(p) for p in dnp.linalg.qr(x, mode=mode))
    want = np.linalg.qr(a, mode=mode)
    assert (q.shape, r.shape) == (want.Q.shape, want.R.shape)
    close(dnp.asarray(q @ r), a, dtype)
    np.testing.assert_array_equal(np.tril(r, -1), 0)
    close(dnp.linalg.pinv(x), np.linalg.pinv(a), dtype)
    same(dnp.linalg.matrix_rank(x), np.linalg.matrix_rank(a))
    for ord in (2, -2, "nuc"):
        close(dnp.linalg.matrix_norm(x, ord=ord), np.linalg.matrix_norm(a, ord=ord), dtype)
    close(dnp.linalg.matrix_norm(x, ord=2, keepdims=True), np.linalg.matrix_norm(a, ord=2, keepdims=True), dtype)


def test_rank_and_pseudo_inverse_of_rank_deficient_matrices(case):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 6, 2)) @ rng.standard_normal((3, 2, 5))  # rank 2
    a[1, :, 3] = 0
    x = dnp.from_numpy(a, chunks=(2, 4, 3))
    same(dnp.linalg.matrix_rank(x), np.linalg.matrix_rank(a))
    same(dnp.linalg.pinv(x), np.linalg.pinv(a), rtol=1e-8)
    rtol = dnp.asarray(np.array([1e-12, 0.9, 1e-12]))
    same(dnp.linalg.matrix_rank(x, rtol=rtol), np.linalg.matrix_rank(a, rtol=np.array([1e-12, 0.9, 1e-12])))
    same(dnp.linalg.pinv(x, rtol=rtol), np.linalg.pinv(a, rtol=np.array([1e-12, 0.9, 1e-12])), rtol=1e-8)
    same(dnp.linalg.pinv(x, rtol=0.5), np.linalg.pinv(a, rtol=0.5), rtol=1e-8)
    same(dnp.linalg.matrix_rank(x, rtol=0.5), np.linalg.matrix_rank(a, rtol=0.5))
    host_rtol = np.array([1e-12, 0.9, 1e-12])  # one per matrix, from the host, as NumPy takes it
    same(dnp.linalg.matrix_rank(x, rtol=host_rtol), np.linalg.matrix_rank(a, rtol=host_rtol))
    same(dnp.linalg.pinv(x, rtol=host_rtol), np.linalg.pinv(a, rtol=host_rtol), rtol=1e-8)
    # A given rtol cuts in float64, as NumPy's does: float32(0.1) is above 0.1 * 1.0 there,
    # and not in float32.
    b = np.diag(np.array([1, 0.1], np.float32))
    y = dnp.from_numpy(b)
    same(dnp.linalg.matrix_rank(y, rtol=0.1), np.linalg.matrix_rank(b, rtol=0.1))
    same(dnp.linalg.pinv(y, rtol=0.1), np.linalg.pinv(b, rtol=0.1))


def test_integer_and_bool_matrices_compute_in_float64(case):
    a = np.array([[4, 1], [2, 3]], dtype=np.int32)
    x = dnp.from_numpy(a)
    same(dnp.linalg.inv(x), np.linalg.inv(a))
    same(dnp.linalg.det(x), np.linalg.det(a))
    same(dnp.linalg.solve(x, dnp.asarray([1, 2])), np.linalg.solve(a, [1, 2]))
    same(dnp.linalg.matrix_power(x, 3), np.linalg.matrix_power(a, 3))
    same(dnp.linalg.det(dnp.asarray(np.eye(3, dtype=bool))), np.linalg.det(np.eye(3, dtype=bool)))


def test_stacks_are_computed_where_they_live(case):
    """Each result chunk of a stack is placed with the input chunk of its matrices."""
    rng = np.random.default_rng(2)
    a = hermitian(rng, (12,), 4, "float64")
    x = dnp.from_numpy(a, chunks=(2, 4, 4))
    assert len(set(x.alloc.homes())) > 1  # spread over the workers
    y = dnp.linalg.inv(x)
    assert y.alloc.homes() == x.alloc.homes()
    w, v = dnp.linalg.eigh(x)
    same(w, np.linalg.eigvalsh(a))
    same(dnp.linalg.det(x), np.linalg.det(a))
    same(y, np.linalg.inv(a))


@pytest.mark.parametrize("chunks", [(2, 3), (5, 1), (7, 7), (3, 4)])
@pytest.mark.parametrize("offset", [-7, -3, -1, 0, 1, 2, 6, 9])
def test_diagonal_and_trace(case, chunks, offset):
    a = np.arange(2 * 7 * 6, dtype=np.int16).reshape(2, 7, 6)
    x = dnp.from_numpy(a, chunks=(1,) + chunks)
    same(dnp.linalg.diagonal(x, offset=offset), np.linalg.diagonal(a, offset=offset))
    same(dnp.linalg.trace(x, offset=offset), np.linalg.trace(a, offset=offset))
    same(dnp.linalg.trace(x, offset=offset, dtype=dnp.float32), np.linalg.trace(a, offset=offset, dtype=np.float32))
    # NumPy's own forms, through the namespace and through NumPy's functions
    same(dnp.diagonal(x, offset, 0, 2), np.diagonal(a, offset, 0, 2))
    same(np.trace(x, offset, axis1=2, axis2=1), np.trace(a, offset, axis1=2, axis2=1))
    same(dnp.diag(x[1], offset), np.diag(a[1], offset))


def test_numpys_diagonal_reads_other_axes_in_place(case):
    a = np.arange(4 * 5 * 6.0).reshape(4, 5, 6)
    x = dnp.from_numpy(a, chunks=(3, 2, 4))
    before = case.allocations()
    d = dnp.diagonal(x, 1, 2, 0)
    assert case.allocations() == before + 1  # the result only: x's axes are not moved first
    same(d, np.diagonal(a, 1, 2, 0))
    with pytest.raises(np.exceptions.AxisError):
        dnp.diagonal(x, 0, 5, 1)
    with pytest.raises(ValueError, match="repeated axis"):
        dnp.trace(x, 0, 1, -2)
    with pytest.raises(TypeError, match="linalg.cross needs two DArrays"):
        dnp.linalg.cross([1, 2, 3], x)


@pytest.mark.parametrize("k", [-2, 0, 3])
def test_diag_builds_a_matrix(case, k):
    v = np.arange(1, 8, dtype=np.float32)
    d = dnp.diag(dnp.from_numpy(v, chunks=3), k)
    assert d.chunks[0][:3] == (3, 3, 1)
    same(d, np.diag(v, k))
    same(np.diag(dnp.from_numpy(v), k), np.diag(v, k))


def test_cross(case):
    rng = np.random.default_rng(3)
    a = rng.integers(-9, 9, (4, 3, 5))
    b = rng.integers(-9, 9, (3, 1))
    x, y = dnp.from_numpy(a, chunks=(2, 2, 2)), dnp.from_numpy(b)
    same(dnp.linalg.cross(x, y, axis=-2), np.linalg.cross(a, b, axis=-2))
    c = rng.standard_normal((5, 3))
    same(dnp.linalg.cross(dnp.from_numpy(c, chunks=(2, 2)), dnp.from_numpy(c[::-1].copy())), np.cross(c, c[::-1]))
    with pytest.raises(ValueError, match="3 elements"):
        dnp.linalg.cross(x, y, axis=-1)


def test_numpy_linalg_functions_run_distributed(case):
    rng = np.random.default_rng(4)
    a = hermitian(rng, (), 5, "float64")
    x = dnp.from_numpy(a, chunks=(2, 3))
    for fn in (np.linalg.inv, np.linalg.det, np.linalg.eigvalsh, np.linalg.cholesky, np.linalg.svd,
               np.linalg.pinv, np.linalg.matrix_rank, np.linalg.slogdet, np.linalg.qr, np.linalg.eigh):
        got = fn(x)
        parts = got if isinstance(got, tuple) else (got,)
        assert all(isinstance(p, dnp.DArray) for p in parts), fn.__name__
    same(np.linalg.svd(x, compute_uv=False), np.linalg.svd(a, compute_uv=False))
    same(np.linalg.matrix_power(x, 2), a @ a)
    with pytest.raises(TypeError, match="numpy.linalg.eigh with UPLO='U'"):
        np.linalg.eigh(x, UPLO="U")
    with pytest.raises(TypeError, match="numpy.linalg.svd with hermitian"):
        np.linalg.svd(x, hermitian=True)


def test_bad_input_is_refused_and_leaves_nothing(case):
    x = dnp.asarray(np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"linalg.inv needs square matrices; got shape \(3, 4\)"):
        dnp.linalg.inv(x)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        dnp.linalg.det(dnp.asarray([1.0, 2.0]))
    with pytest.raises(ValueError, match="do not align"):
        dnp.linalg.solve(dnp.asarray(np.eye(3)), dnp.asarray(np.ones(4)))
    with pytest.raises(ValueError, match="mode must be"):
        dnp.linalg.qr(x, mode="r")
    with pytest.raises(ValueError, match="ord='bad'"):
        dnp.linalg.matrix_norm(x, ord="bad")
    with pytest.raises(TypeError, match="exponent must be an integer"):
        dnp.linalg.matrix_power(dnp.asarray(np.eye(2)), 1.5)
    with pytest.raises(ValueError, match="do not broadcast"):
        dnp.linalg.solve(dnp.asarray(np.ones((2, 3, 3))), dnp.asarray(np.ones((3, 3, 3))))


def test_a_singular_matrix_raises_numpys_error_on_cpu(case):
    if case.backend != "cpu":
        pytest.skip("cuSOLVER answers NaNs, as CuPy does")
    # The case fixture then checks that the failed result was freed: an exception kept
    # by Dask must not hold the caller's frames (and so the arrays) alive.
    y = dnp.linalg.inv(dnp.asarray(np.zeros((2, 3, 3))))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        y.to_numpy()
    with pytest.raises(np.linalg.LinAlgError):
        dnp.sum(y * 2)  # a reduction's gather meets the same error


def test_a_stacked_product_keeps_the_stacks_chunks(case):
    a, b = np.arange(96.0).reshape(4, 6, 4), np.arange(48.0).reshape(4, 4, 3)
    x, y = dnp.from_numpy(a, chunks=(2, 6, 4)), dnp.from_numpy(b, chunks=(2, 4, 3))
    z = x @ y
    assert z.chunks == ((2, 2), (6,), (3,))  # one task per stack chunk, not one for all
    same(z, a @ b)


def test_matrix_rank_runs_once_where_the_matrices_are(case, direct_tasks):
    """The singular values are counted where they are computed: one task per worker
    holding the stack, no stored singular values, reductions or counts after them."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 6, 3)) @ rng.standard_normal((4, 3, 5))  # rank 3
    x = dnp.from_numpy(a, chunks=(1, 6, 5))
    homes = {c.worker for c in x.alloc.chunks}
    x.wait()
    direct_tasks.clear()
    got = dnp.asnumpy(dnp.linalg.matrix_rank(x))
    np.testing.assert_array_equal(got, np.linalg.matrix_rank(a))
    keys = list(direct_tasks)
    assert len(keys) == len(homes) and all(k.startswith("dgvm-linalg-matrix_rank-") for k in keys), keys


def test_a_host_rtol_that_does_not_fit_the_stack_is_refused_and_leaves_nothing(case):
    x = dnp.from_numpy(np.eye(3)[None].repeat(4, axis=0))
    for fn in (dnp.linalg.matrix_rank, dnp.linalg.pinv):
        with pytest.raises(ValueError, match=r"stacks of shapes \[\(4, 3, 3\), \(2,\)\] do not broadcast"):
            fn(x, rtol=np.array([0.1, 0.2]))
    del x  # the case checks that no allocation (the rtols' included) is left
