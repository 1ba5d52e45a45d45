"""Cases the array API standard's test suite (``array-api-tests``) found, each against NumPy:
signed zeros that ``full`` keeps, ``expand_dims``' axis by position or as a tuple, ``repeat``
with an array of counts on arrays with no elements, and the standard's parameter order of
the creation functions (``device`` where the standard puts it, dgvm's ``chunks`` after)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import dgvm.array as dnp


def same(got, want):
    """``got`` (a DArray) has NumPy's shape, dtype and values ``want``, signs of zero
    included."""
    assert isinstance(got, dnp.DArray), type(got)
    got = dnp.asnumpy(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind in "fc":
        for part in (np.real, np.imag):
            np.testing.assert_array_equal(np.signbit(part(got)), np.signbit(part(want)))


@pytest.mark.parametrize("value, dtype", [
    (-0.0, None), (-0.0, np.float32), (0.0, np.float64), (complex(-0.0, 0.0), None),
    (complex(0.0, -0.0), np.complex64), (-0.0, np.int64), (0, np.uint8), (False, None),
])
def test_full_keeps_the_sign_of_zero(case, value, dtype):
    # A fill equal to 0 but with a sign bit must still be written: new memory is +0.0.
    shape = (5, 3)
    same(dnp.full(shape, value, dtype=dtype, chunks=(2, 2)), np.full(shape, value, dtype=dtype))
    want = np.full(shape, value, dtype=dtype)
    like = dnp.zeros(shape, dtype=want.dtype, chunks=(4, 1))
    same(dnp.full_like(like, value), np.full_like(want, value))


def test_full_of_a_negative_zero_array_value(case):
    same(dnp.full((3,), dnp.asarray(-0.0)), np.full((3,), np.asarray(-0.0)))


@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (0, 3)])
def test_expand_dims_takes_numpys_axis_forms(case, shape):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    d = dnp.asarray(x)
    n = x.ndim + 1
    for axis in range(-n, n):
        same(dnp.expand_dims(d, axis), np.expand_dims(x, axis))  # by position, as NumPy's
        same(dnp.expand_dims(d, axis=axis), np.expand_dims(x, axis=axis))
    for axes in [(0, -1), (1, 0), (0, 1, 2), (-1, -2)]:
        same(dnp.expand_dims(d, axes), np.expand_dims(x, axes))


def test_expand_dims_refuses_what_numpy_refuses(case):
    x, d = np.ones((2, 3)), dnp.ones((2, 3))
    for axis in [3, -4, 7, (0, 4)]:
        with pytest.raises(np.exceptions.AxisError):
            np.expand_dims(x, axis)
        with pytest.raises(np.exceptions.AxisError):  # an IndexError, as the standard asks
            dnp.expand_dims(d, axis)
        with pytest.raises(IndexError):
            dnp.expand_dims(d, axis=axis)
    with pytest.raises(ValueError, match="repeated"):
        np.expand_dims(x, (0, 0))
    with pytest.raises(ValueError, match="repeated"):
        dnp.expand_dims(d, (0, 0))


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3), (3,), (2, 3)])
@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("dtype", [np.int8, np.uint64, np.int64])
def test_repeat_with_an_array_of_counts(case, shape, axis, dtype):
    # On an array with no elements the result's length along ``axis`` is still the sum of
    # the counts: ``repeat(zeros((2, 0)), [2], axis=0)`` has 4 rows, as NumPy's.
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    size = x.size if axis is None else x.shape[axis]
    for counts_shape in [(1,), (size,), ()]:
        counts = np.arange(1, 1 + int(np.prod(counts_shape)), dtype=dtype).reshape(counts_shape)
        want = np.repeat(x, counts.astype(np.int64), axis=axis)
        same(dnp.repeat(dnp.asarray(x), dnp.asarray(counts), axis=axis), want)
        same(dnp.asarray(x).repeat(dnp.asarray(counts), axis=axis), want)
        if counts.size:  # as a Python list ([] would be float64 counts, refused by NumPy too)
            same(dnp.repeat(dnp.asarray(x), counts.tolist() if counts.ndim else int(counts), axis=axis), want)


def test_repeat_counts_that_do_not_match_are_refused_as_numpy_refuses(case):
    x = np.zeros((2, 0))
    with pytest.raises(ValueError):
        np.repeat(x, np.array([1, 2, 3]), axis=0)
    with pytest.raises(ValueError):
        dnp.repeat(dnp.asarray(x), dnp.asarray(np.array([1, 2, 3])), axis=0)


@pytest.mark.parametrize("name, lead", [("empty", 2), ("zeros", 2), ("ones", 2), ("full", 3)])
def test_creation_functions_have_the_standards_parameter_order(case, name, lead):
    # The standard: empty(shape, *, dtype=None, device=None); dgvm's own keywords follow.
    params = list(inspect.signature(getattr(dnp, name)).parameters.values())
    assert [p.name for p in params[:lead + 1]][-2:] == ["dtype", "device"]
    assert params[lead].kind is inspect.Parameter.KEYWORD_ONLY
    fill = (7,) if name == "full" else ()
    x = getattr(dnp, name)((4, 6), *fill, dnp.int16, device=None, chunks=(2, 3))
    assert x.chunks == ((2, 2), (3, 3)) and x.dtype == np.int16
    with pytest.raises(TypeError):  # a third positional argument is not chunks any more
        getattr(dnp, name)((4, 6), *fill, dnp.int16, (2, 3))


def test_solve_with_no_right_hand_sides_reads_the_matrix(case):
    # The result has no elements, but NumPy checks the matrix: stand-in zeros would be
    # singular where the real matrix is not.
    rng = np.random.default_rng(0)
    a = (np.eye(4) * 3 + rng.standard_normal((2, 4, 4))).astype(np.complex128)
    b = np.empty((2, 4, 0), np.complex128)
    same(dnp.linalg.solve(dnp.asarray(a), dnp.asarray(b)), np.linalg.solve(a, b))
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.solve(np.zeros((2, 2)), np.empty((2, 0)))
    with pytest.raises(np.linalg.LinAlgError):  # a singular matrix is still refused
        dnp.linalg.solve(dnp.zeros((2, 2)), dnp.asarray(np.empty((2, 0))))


def test_asarray_of_nested_sequences_holding_arrays(case):
    x, y = np.arange(12.0), np.arange(12.0) * -2
    dx, dy = dnp.asarray(x, chunks=5), dnp.asarray(y, chunks=4)
    # 0-d arrays among host values (the suite's expected values): each read once
    same(dnp.asarray([[dx[i] * dy[j] for j in range(4)] for i in range(3)]),
         np.asarray([[x[i] * y[j] for j in range(4)] for i in range(3)]))
    same(dnp.asarray([dx[1], 2.5, dy[3]], dtype=dnp.float32),
         np.asarray([x[1], 2.5, y[3]], dtype=np.float32))
    same(dnp.asarray((dx[0], (dy[1] > 0))), np.asarray((x[0], y[1] > 0)))
    # arrays with elements are stacked where they live
    big = np.arange(5000, dtype=np.int32)
    same(dnp.asarray([dnp.asarray(big), dnp.asarray(big * 2)], dtype=dnp.int64),
         np.asarray([big, big * 2], dtype=np.int64))
    with pytest.raises(ValueError):  # inhomogeneous, as NumPy refuses it
        dnp.asarray([dnp.asarray(big), dnp.asarray(big[:10])])
