"""NumPy's names and call forms in dgvm.array, against NumPy element for element: array and
copy, the joins, splits, pad and axis helpers, einsum/inner/vdot/dot, NumPy's positional
forms (sort(a, 1), concatenate(xs, 0), linalg.svd(a, False)), the scalar types as dtype
names, and elementwise functions of scalars; each over shapes, chunkings and dtypes, with
the errors bad input gets, and a guard that none of them gathers an array to the caller."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.array import data_types
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.trees import BINARY, UNARY


def same(got, want, rtol=1e-10):
    """Equal to NumPy's answer: type of container, shape, dtype and every element."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, type(want)), (type(got), type(want))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, rtol)
        return
    assert isinstance(got, dnp.DArray), type(got)
    got, want = dnp.asnumpy(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-9)
    else:
        np.testing.assert_array_equal(got, want)


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == bool:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 20, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# (shape, chunks): one block, uneven blocks, several blocks per axis.
CASES = [((7,), (3,)), ((6, 5), (6, 5)), ((6, 5), (4, 2)), ((4, 3, 5), (3, 2, 2))]
DTYPES = ["int32", "float64", "complex128", "bool"]


# -- dtype names and scalars (no cluster needed) ------------------------------------------
def test_dtype_names_are_numpys_scalar_types():
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128", "int_", "intp", "bool_"):
        assert getattr(dnp, name) is getattr(np, name), name
    assert dnp.dtype is np.dtype
    v = dnp.float32(5)
    assert type(v) is np.float32 and v == np.float32(5)
    assert dnp.int8(-3) == np.int8(-3) and type(dnp.complex64(1j)) is np.complex64
    assert dnp.dtype("f4") == np.float32 and dnp.dtype(dnp.int16).itemsize == 2
    assert dnp.bool(1) is np.True_


UNARY_SCALARS = [2.0, 0.5, -1.5, 3, -4, True, np.float32(0.25), np.int8(5), np.uint8(7), 1 + 2j]
BINARY_SCALARS = [(2.0, 3.0), (7, 2), (-7, 3), (True, False), (np.float32(1.5), 2), (np.int16(9), np.int16(4)),
                  (2, 0.5), (1 + 1j, 2.0), (np.uint8(200), 100)]


def _numpy_answer(fn, args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return fn(*args), None
        except Exception as e:
            return None, type(e)


def _check_scalar_call(name, args):
    np_name = {"acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan",
               "atanh": "arctanh", "atan2": "arctan2", "bitwise_invert": "invert", "pow": "power",
               "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift"}.get(name, name)
    want, error = _numpy_answer(getattr(np, np_name), args)
    got, got_error = _numpy_answer(getattr(dnp, name), args)
    assert got_error == error, (name, args, got_error, error)
    if error is None:
        assert type(got) is type(want), (name, args, type(got), type(want))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x", UNARY_SCALARS, ids=repr)
def test_unary_functions_of_scalars_answer_as_numpy(x):
    for name in UNARY:
        _check_scalar_call(name, (x,))


@pytest.mark.parametrize("xy", BINARY_SCALARS, ids=repr)
def test_binary_functions_of_scalars_answer_as_numpy(xy):
    for name in BINARY:
        _check_scalar_call(name, xy)
    assert dnp.sqrt(2.0) == np.sqrt(2.0) and type(dnp.sqrt(2.0)) is np.float64
    assert type(dnp.clip(3, 0, 2)) is type(np.clip(3, 0, 2)) and dnp.clip(3.5, 0, 2) == 2.0


def test_elementwise_functions_refuse_host_arrays_by_name():
    with pytest.raises(TypeError, match=r"dgvm.array.sqrt takes DArrays and scalars, not list.*asarray"):
        dnp.sqrt([1.0, 2.0])
    with pytest.raises(TypeError, match="not ndarray"):
        dnp.add(np.ones(3), 1.0)


# -- array, copy ----------------------------------------------------------------------------
@pytest.mark.parametrize("obj,kw", [
    ([[1, 2, 3], [4, 5, 6]], {}), ([1.5, 2, 3], {"dtype": np.float32}), ([1, 2], {"ndmin": 3}),
    (3.25, {}), (7, {"ndmin": 1}), ([[1 + 2j], [3]], {}), ([True, False, True], {}),
    (np.arange(24).reshape(2, 3, 4), {"dtype": "int16"}), ((1, 2, 3), {"dtype": float}),
])
def test_array_of_host_data(case, obj, kw):
    same(dnp.array(obj, **kw), np.array(obj, **kw))
    same(dnp.copy(obj), np.copy(obj))


@pytest.mark.parametrize("shape,chunks", CASES)
def test_array_and_copy_of_darrays(case, shape, chunks):
    a = sample(shape, "float64")
    x = dnp.from_numpy(a, chunks=chunks)
    y = dnp.array(x)
    assert y is not x
    y[...] = 0  # a copy: x keeps its values
    same(x, a)
    assert dnp.array(x, copy=False) is x and dnp.array(x, copy=None) is x
    same(dnp.array(x, dtype=np.int32, copy=None), np.array(a, dtype=np.int32))
    same(dnp.array(x, ndmin=len(shape) + 2), np.array(a, ndmin=len(shape) + 2))
    c = dnp.copy(x)
    c += 1
    same(c, a + 1)
    same(x, a)
    # a list of DArrays (and host values) is stacked, as NumPy stacks arrays
    same(dnp.array([x, x * 2, a]), np.array([a, a * 2, a]))
    same(dnp.array([[x], [x]], dtype=np.float32), np.array([[a], [a]], dtype=np.float32))


def test_array_refuses_what_numpy_refuses(case):
    x = dnp.from_numpy(np.arange(6.0), chunks=4)
    with pytest.raises(ValueError, match="copy=False, but the dtype changes"):
        dnp.array(x, dtype=np.int32, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        dnp.array([1, 2], copy=False)
    with pytest.raises(ValueError, match="inhomogeneous"):
        dnp.array([x, x[:3]])
    with pytest.raises(ValueError, match="order must be"):
        dnp.array(x, order="X")
    with pytest.raises(TypeError, match="ndmin"):
        dnp.array(x, ndmin=-1)
    with pytest.raises(TypeError, match="float16 arrays are not supported"):
        dnp.array([1.0, 2.0], dtype=dnp.float16)
    with pytest.raises(TypeError, match="float16 arrays are not supported"):
        dnp.asarray(np.ones(3, np.float16))
    with pytest.raises(TypeError, match="float16 arrays are not supported"):
        x.astype(dnp.float16)


def test_astype_with_numpys_arguments(case):
    a = np.arange(-3.0, 3.0, 0.7)
    x = dnp.from_numpy(a, chunks=4)
    same(data_types.array_astype(x, dtype=np.int16), a.astype(np.int16))
    same(data_types.array_astype(x, "float32", "C", "same_kind"), a.astype("float32", "C", "same_kind"))
    assert data_types.array_astype(x, np.float64, copy=False) is x
    with pytest.raises(TypeError, match="according to the rule 'safe'"):
        data_types.array_astype(x, np.int32, casting="safe")
    with pytest.raises(ValueError, match="casting must be one of"):
        data_types.array_astype(x, np.int32, casting="wild")


# -- ravel, swapaxes, atleast_*d --------------------------------------------------------------
@pytest.mark.parametrize("shape,chunks", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ravel_swapaxes_atleast(case, shape, chunks, dtype):
    a = sample(shape, dtype)
    x = dnp.from_numpy(a, chunks=chunks)
    for order in ("C", "F", "A", "K"):
        same(dnp.ravel(x, order), np.ravel(a, order))
    same(dnp.swapaxes(x, 0, -1), np.swapaxes(a, 0, -1))
    same(dnp.atleast_1d(x), np.atleast_1d(a))
    same(dnp.atleast_2d(x), np.atleast_2d(a))
    same(dnp.atleast_3d(x), np.atleast_3d(a))
    s = x.sum()  # a 0-d array
    same(dnp.atleast_1d(s, x), np.atleast_1d(a.sum(), a))
    same(dnp.atleast_2d(s), np.atleast_2d(a.sum()))
    same(dnp.atleast_3d(s, x[0]), np.atleast_3d(a.sum(), a[0]))


def test_axis_helpers_refuse_bad_axes(case):
    x = dnp.from_numpy(np.ones((3, 4)), chunks=2)
    with pytest.raises(np.exceptions.AxisError):
        dnp.swapaxes(x, 0, 2)
    with pytest.raises(TypeError, match="axis1 must be an int"):
        dnp.swapaxes(x, None, 1)
    with pytest.raises(ValueError, match="order must be one of"):
        dnp.ravel(x, "Z")
    with pytest.raises(TypeError, match=r"atleast_2d: array 1 must be a DArray, not list"):
        dnp.atleast_2d(x, [1, 2])


# -- joins ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,chunks", CASES)
@pytest.mark.parametrize("dtype", ["int32", "float64", "bool"])
def test_joins_match_numpy(case, shape, chunks, dtype):
    a, b = sample(shape, dtype, 1), sample(shape, dtype, 2)
    x, y = dnp.from_numpy(a, chunks=chunks), dnp.from_numpy(b, chunks=tuple(max(1, c - 1) for c in chunks))
    same(dnp.hstack([x, y]), np.hstack([a, b]))
    same(dnp.vstack((x, y, x)), np.vstack((a, b, a)))
    same(dnp.column_stack([x, y]), np.column_stack([a, b]))
    same(dnp.dstack([x, y]), np.dstack([a, b]))
    for axis in range(-len(shape), len(shape)):
        same(dnp.concatenate([x, y], axis), np.concatenate([a, b], axis))
    same(dnp.concatenate((x, y), None), np.concatenate((a, b), None))
    same(dnp.hstack([x, y], dtype=np.float32), np.hstack([a, b], dtype=np.float32))
    same(dnp.vstack([x, y], dtype=np.complex128, casting="safe"), np.vstack([a, b], dtype=np.complex128, casting="safe"))


def test_joins_of_mixed_shapes_and_dtypes(case):
    v, m = np.arange(4, dtype=np.int8), np.arange(12.0).reshape(4, 3)
    x, y = dnp.from_numpy(v, chunks=3), dnp.from_numpy(m, chunks=(3, 2))
    same(dnp.column_stack([x, y, x]), np.column_stack([v, m, v]))
    same(dnp.vstack([x, x.astype(np.float32)]), np.vstack([v, v.astype(np.float32)]))
    same(dnp.hstack([x, dnp.zeros(0, dtype=np.int8), x]), np.hstack([v, np.zeros(0, np.int8), v]))
    same(dnp.concatenate([y, y[:1]], 0), np.concatenate([m, m[:1]], 0))


def test_joins_refuse_what_numpy_refuses(case):
    x = dnp.from_numpy(np.ones((3, 4)), chunks=2)
    with pytest.raises(ValueError, match="need at least one array"):
        dnp.vstack([])
    with pytest.raises(TypeError, match="list or tuple, not generator"):
        dnp.hstack(a for a in [x, x])
    with pytest.raises(TypeError, match="according to the rule 'same_kind'"):
        dnp.concatenate([x, x], 0, dtype=np.int32)
    with pytest.raises(ValueError, match="do not match"):
        dnp.vstack([x, dnp.ones((3, 5))])
    with pytest.raises(TypeError, match="out= is not supported"):
        dnp.concatenate([x, x], 0, x)
    with pytest.raises(TypeError, match="array 1 must be a DArray, not ndarray"):
        dnp.hstack([x, np.ones((3, 4))])


# -- split, array_split -------------------------------------------------------------------------
@pytest.mark.parametrize("shape,chunks", CASES)
def test_splits_match_numpy(case, shape, chunks):
    a = sample(shape, "float64")
    x = dnp.from_numpy(a, chunks=chunks)
    for axis in range(len(shape)):
        n = shape[axis]
        for sections in {1, n, *(s for s in (2, 3, 5) if n % s == 0)}:
            same(dnp.split(x, sections, axis), np.split(a, sections, axis))
        for sections in (1, 2, 3, n + 2):
            same(dnp.array_split(x, sections, axis=axis), np.array_split(a, sections, axis=axis))
        for points in ([1], [1, 3], [0, n], [2, 1, n + 4], [-2], np.array([1, 2])):
            same(dnp.split(x, points, axis=axis), np.split(a, points, axis=axis))
            same(dnp.array_split(x, points, axis), np.array_split(a, points, axis))


def test_split_pieces_are_views_of_the_array(case):
    a = np.arange(12.0)
    x = dnp.from_numpy(a, chunks=5)
    first, second, third = dnp.split(x, 3)
    same(second, a[4:8])
    assert sum(p.size for p in (first, second, third)) == 12


def test_splits_refuse_what_numpy_refuses(case):
    x = dnp.from_numpy(np.ones((6, 4)), chunks=4)
    with pytest.raises(ValueError, match="does not result in an equal division"):
        dnp.split(x, 4)
    with pytest.raises(ValueError, match="number sections must be larger than 0"):
        dnp.array_split(x, 0)
    with pytest.raises(np.exceptions.AxisError):
        dnp.split(x, 2, axis=2)
    with pytest.raises(TypeError, match="indices_or_sections must be an int or a sequence of ints"):
        dnp.split(x, [1.5])
    with pytest.raises(ValueError, match="0-d array cannot be split"):
        dnp.split(x.sum(), 1)


# -- pad ------------------------------------------------------------------------------------
WIDTHS = [0, 2, (1, 3), ((2, 0),), ((0, 1), (3, 2), (1, 1)), ((5, 4), (0, 7), (2, 9))]


def _widths_for(width, ndim):
    """A pad_width of NumPy's forms that fits ``ndim`` axes."""
    if isinstance(width, tuple) and isinstance(width[0], tuple) and len(width) > 1:
        return width[:ndim] if len(width) >= ndim else width + ((1, 1),) * (ndim - len(width))
    return width


@pytest.mark.parametrize("shape,chunks", CASES)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
def test_pad_matches_numpy(case, shape, chunks, mode):
    for k, width in enumerate(WIDTHS):
        a = sample(shape, DTYPES[k % len(DTYPES)], k)  # each dtype meets several widths
        x = dnp.from_numpy(a, chunks=chunks)
        w = _widths_for(width, len(shape))
        same(dnp.pad(x, w, mode), np.pad(a, w, mode))


@pytest.mark.parametrize("shape,chunks", CASES)
@pytest.mark.parametrize("dtype", ["int32", "float64", "complex128"])
def test_pad_constant_values_match_numpy(case, shape, chunks, dtype):
    a = sample(shape, dtype)
    x = dnp.from_numpy(a, chunks=chunks)
    same(dnp.pad(x, 2, constant_values=7), np.pad(a, 2, constant_values=7))
    cv = tuple((i + 1, -i - 2) for i in range(len(shape)))  # corners: the later axis's value
    w = ((1, 2),) * len(shape)
    same(dnp.pad(x, w, "constant", constant_values=cv), np.pad(a, w, "constant", constant_values=cv))
    same(dnp.pad(x, 1, constant_values=(3, 4)), np.pad(a, 1, constant_values=(3, 4)))


def test_pad_empty_mode_and_odd_cases(case):
    a = np.arange(10, dtype=np.int64).reshape(2, 5)
    x = dnp.from_numpy(a, chunks=(1, 2))
    got = dnp.pad(x, 2, "empty")  # NumPy leaves the pad undefined: its shape and the middle
    assert got.shape == (6, 9) and got.dtype == a.dtype
    np.testing.assert_array_equal(dnp.asnumpy(got)[2:-2, 2:-2], a)
    same(dnp.pad(x, ((0, 0), (13, 11)), "reflect"), np.pad(a, ((0, 0), (13, 11)), "reflect"))  # wider than the axis
    same(dnp.pad(x, 7, "wrap"), np.pad(a, 7, "wrap"))
    same(dnp.pad(x, 1, constant_values=-1.7), np.pad(a, 1, constant_values=-1.7))  # cast as NumPy casts
    same(dnp.pad(x.astype(np.uint8), 1, constant_values=-1), np.pad(a.astype(np.uint8), 1, constant_values=-1))
    same(dnp.pad(dnp.zeros((0, 3)), ((1, 1), (0, 2))), np.pad(np.zeros((0, 3)), ((1, 1), (0, 2))))


def test_pad_refuses_what_numpy_refuses(case):
    x = dnp.from_numpy(np.ones((3, 4)), chunks=2)
    with pytest.raises(ValueError, match="negative values"):
        dnp.pad(x, -1)
    with pytest.raises(TypeError, match="`pad_width` must be of integral type"):
        dnp.pad(x, 1.5)
    with pytest.raises(ValueError, match=r"pad_width \[1, 2, 3\] does not give a \(before, after\) pair"):
        dnp.pad(x, [1, 2, 3])
    with pytest.raises(ValueError, match="mode 'bogus' is not supported"):
        dnp.pad(x, 1, "bogus")
    with pytest.raises(dgvm.NotSupported, match="mode 'mean' is not supported by dgvm.array"):
        dnp.pad(x, 1, "mean")
    with pytest.raises(NotImplementedError):  # NotSupported is NumPy-program friendly
        dnp.pad(x, 1, "linear_ramp")
    with pytest.raises(ValueError, match="unsupported keyword arguments for mode 'edge'"):
        dnp.pad(x, 1, "edge", constant_values=3)
    with pytest.raises(dgvm.NotSupported, match="reflect_type='odd'"):
        dnp.pad(x, 1, "reflect", reflect_type="odd")
    with pytest.raises(TypeError, match="array must be a DArray, not list"):
        dnp.pad([1, 2], 1)


# -- einsum, inner, vdot, dot, outer --------------------------------------------------------
EINSUMS = [
    ("ij,jk->ik", [(5, 6), (6, 4)]), ("ij,jk", [(5, 6), (6, 4)]), ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)]), ("ii->", [(5, 5)]), ("ii", [(4, 4)]),
    ("ii->i", [(5, 5)]), ("ij->ji", [(5, 6)]), ("ijk->kji", [(2, 3, 4)]), ("i,j->ij", [(5,), (3,)]),
    ("i,j", [(4,), (6,)]), ("ij->i", [(5, 6)]), ("ij->j", [(5, 6)]), ("ijk->", [(2, 3, 4)]),
    ("i,i", [(7,), (7,)]), ("i,i->i", [(7,), (7,)]), ("ij,ij->i", [(5, 6), (5, 6)]),
    ("ij,j->i", [(5, 6), (6,)]), ("ij,kj->ik", [(5, 6), (4, 6)]), ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]), ("ij,i->j", [(1, 3), (4,)]), ("i,i", [(1,), (5,)]),
    ("...i,...i->...", [(3, 4), (4,)]), ("ba", [(3, 2)]), ("Ab,bc->cA", [(3, 4), (4, 2)]),
    ("iij->j", [(3, 3, 4)]), ("ij,jk->", [(3, 4), (4, 5)]),
]


@pytest.mark.parametrize("subscripts,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_matches_numpy(case, subscripts, shapes):
    for split, dtype in ((1, "float64"), (2, "int32"), (3, "complex128")):
        arrays = [sample(s, dtype, i) for i, s in enumerate(shapes)]
        xs = [dnp.from_numpy(a, chunks=tuple(max(1, n // (split + i)) for n in a.shape)) for i, a in enumerate(arrays)]
        same(dnp.einsum(subscripts, *xs), np.einsum(subscripts, *arrays))


def test_einsum_sublists_dtype_and_numpy_dispatch(case):
    a, b = sample((4, 5), "float64"), sample((5, 3), "float64", 1)
    x, y = dnp.from_numpy(a, chunks=(3, 2)), dnp.from_numpy(b, chunks=(2, 2))
    same(dnp.einsum(x, [0, 1], y, [1, 2], [0, 2]), np.einsum(a, [0, 1], b, [1, 2], [0, 2]))
    same(dnp.einsum(x, [0, 26]), np.einsum(a, [0, 26]))
    same(dnp.einsum(x, [Ellipsis, 1], [Ellipsis]), np.einsum(a, [Ellipsis, 1], [Ellipsis]))
    i = sample((4, 4), "int16")
    xi = dnp.from_numpy(i, chunks=3)
    same(dnp.einsum("ij->", xi), np.einsum("ij->", i))  # sums keep the dtype, as NumPy's
    same(dnp.einsum("ij,jk", xi, xi, dtype=np.float64), np.einsum("ij,jk", i, i, dtype=np.float64))
    same(dnp.einsum("ii", xi, dtype=np.int8, casting="unsafe"), np.einsum("ii", i, dtype=np.int8, casting="unsafe"))
    same(np.einsum("ij,jk->ki", x, y), np.einsum("ij,jk->ki", a, b))  # NumPy's function, distributed


def test_einsum_refuses_what_numpy_refuses(case):
    x = dnp.from_numpy(np.ones((3, 4)), chunks=2)
    with pytest.raises(ValueError, match="subscripts must be letters"):
        dnp.einsum("i1,jk", x, x)
    with pytest.raises(ValueError, match="name 2 operands, 1 were given"):
        dnp.einsum("ij,jk", x)
    with pytest.raises(ValueError, match="has 2 dimensions but 3 subscripts"):
        dnp.einsum("ijk", x)
    with pytest.raises(ValueError, match="output subscript 'z' which never appeared"):
        dnp.einsum("ij->z", x)
    with pytest.raises(ValueError, match="multiple times"):
        dnp.einsum("ij->ii", x)
    with pytest.raises(ValueError, match="could not be broadcast together: subscript 'j' has 4 and 3"):
        dnp.einsum("ij,jk", x, x)
    with pytest.raises(ValueError, match="subscript .i. has 3 and 4 elements"):
        dnp.einsum("ii", x)
    with pytest.raises(ValueError, match="no '...' ellipsis"):
        dnp.einsum("...j->j", dnp.ones((2, 3, 4)))
    with pytest.raises(dgvm.NotSupported, match="out="):
        dnp.einsum("ij", x, out=x)
    with pytest.raises(TypeError, match="cannot cast operand 0 from float64 to int32 according to the rule 'safe'"):
        dnp.einsum("ij", x, dtype=np.int32)
    with pytest.raises(TypeError, match="operand 1 must be a DArray, not ndarray"):
        dnp.einsum("ij,jk", x, np.ones((4, 2)))


@pytest.mark.parametrize("dtype", ["int32", "float64", "complex128"])
@pytest.mark.parametrize("sa,sb", [((6,), (6,)), ((5, 6), (6,)), ((5, 6), (4, 6)), ((2, 3, 6), (4, 6)), ((6,), (2, 5, 6))])
def test_inner_vdot_dot_outer_match_numpy(case, dtype, sa, sb):
    a, b = sample(sa, dtype, 1), sample(sb, dtype, 2)
    x, y = dnp.from_numpy(a, chunks=tuple(max(1, n // 2) for n in sa)), dnp.from_numpy(b, chunks=3)
    same(dnp.inner(x, y), np.inner(a, b))
    same(dnp.outer(x, y), np.outer(a, b))
    if a.size == b.size:
        same(dnp.vdot(x, y), np.vdot(a, b))
    same(dnp.vdot(x, x), np.vdot(a, a))
    same(dnp.dot(x, 3), np.dot(a, 3))
    same(dnp.inner(2, y), np.inner(2, b))
    if sa[-1] == sb[max(len(sb) - 2, 0)]:
        same(dnp.dot(x, y), np.dot(a, b))


def test_products_refuse_what_numpy_refuses(case):
    x, y = dnp.ones((3, 4)), dnp.ones((5, 3))
    with pytest.raises(ValueError, match="not aligned"):
        dnp.inner(x, y)
    with pytest.raises(ValueError, match="different lengths"):
        dnp.vdot(x, y)
    with pytest.raises(TypeError, match="vdot: b must be a DArray"):
        dnp.vdot(x, [1.0])
    with pytest.raises(TypeError, match="dot: b must be a DArray or a scalar, not list"):
        dnp.dot(x, [1.0])


# -- NumPy's positional forms ---------------------------------------------------------------
@pytest.mark.parametrize("shape,chunks", CASES)
def test_sort_and_argsort_take_numpys_arguments(case, shape, chunks):
    a = np.random.default_rng(3).integers(0, 4, size=shape).astype(np.float64)  # many ties
    x = dnp.from_numpy(a, chunks=chunks)
    for axis in {0, -1}:
        same(dnp.sort(x, axis), np.sort(a, axis))
        same(dnp.argsort(x, axis, "stable"), np.argsort(a, axis, "stable"))
    same(dnp.sort(x, None), np.sort(a, None))
    same(dnp.argsort(x, None, kind="stable"), np.argsort(a, None, kind="stable"))
    same(dnp.sort(x, -1, "quicksort"), np.sort(a, -1, "quicksort"))
    same(np.sort(x, 0), np.sort(a, 0))  # NumPy's function, distributed
    with pytest.raises(ValueError, match="kind must be one of"):
        dnp.sort(x, 0, "bogo")
    with pytest.raises(ValueError, match="order= names fields"):
        dnp.argsort(x, 0, None, "f0")


@pytest.mark.parametrize("shape,chunks", [((6, 6), (4, 3)), ((7, 4), (3, 4)), ((3, 5, 5), (2, 2, 3))])
def test_linalg_takes_numpys_arguments(case, shape, chunks):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(shape)
    x = dnp.from_numpy(a, chunks=chunks)
    for full in (True, False):
        u, s, vh = dnp.linalg.svd(x, full)
        nu, ns, nvh = np.linalg.svd(a, full)
        assert u.shape == nu.shape and vh.shape == nvh.shape
        same(s, ns)
        k = ns.shape[-1]
        rebuilt = dnp.asnumpy(u)[..., :k] * dnp.asnumpy(s)[..., None, :] @ dnp.asnumpy(vh)[..., :k, :]
        np.testing.assert_allclose(rebuilt, a, atol=1e-10)
    same(dnp.linalg.svd(x, False, False), np.linalg.svd(a, False, False))
    same(dnp.linalg.norm(x), np.linalg.norm(a))
    same(dnp.linalg.norm(x, None, -1), np.linalg.norm(a, None, -1))
    same(dnp.linalg.norm(x, 1, (-2, -1)), np.linalg.norm(a, 1, (-2, -1)))
    if shape[-1] == shape[-2]:
        m = a + shape[-1] * np.eye(shape[-1])
        xm = dnp.from_numpy(m, chunks=chunks)
        same(dnp.linalg.inv(xm), np.linalg.inv(m), rtol=1e-8)
        same(dnp.linalg.det(xm), np.linalg.det(m), rtol=1e-8)
        b = rng.standard_normal(shape[:-1] + (2,))
        same(dnp.linalg.solve(xm, dnp.from_numpy(b, chunks=2)), np.linalg.solve(m, b), rtol=1e-8)
        v = rng.standard_normal(shape[-1])
        same(dnp.linalg.solve(xm, dnp.from_numpy(v, chunks=4)), np.linalg.solve(m, v), rtol=1e-8)
    with pytest.raises(dgvm.NotSupported, match="hermitian=True"):
        dnp.linalg.svd(x, True, True, True)


# -- nothing is gathered ------------------------------------------------------------------------
def test_none_of_them_gathers_an_array_to_the_caller(case, monkeypatch):
    a = np.arange(48.0).reshape(6, 8)
    x = dnp.from_numpy(a, chunks=(4, 3))
    v = dnp.from_numpy(np.arange(8.0), chunks=3)

    def refuse(self):
        raise AssertionError(f"gathered an array of shape {self.shape} to the caller")

    monkeypatch.setattr(ArrayCore, "to_numpy", refuse)
    results = [
        dnp.array(x), dnp.copy(x), dnp.ravel(x), dnp.ravel(x, "F"), dnp.hstack([x, x]), dnp.vstack([v, v]),
        dnp.column_stack([v, x.T]), dnp.dstack([x, x]), *dnp.split(x, 2), *dnp.array_split(x, [1, 5], 1),
        dnp.pad(x, 2), dnp.pad(x, ((1, 2), (3, 4)), "reflect"), dnp.pad(x, 3, "wrap"), dnp.pad(x, 1, "edge"),
        dnp.swapaxes(x, 0, 1), dnp.atleast_3d(x), dnp.einsum("ij,kj->ik", x, x), dnp.einsum("ii", x[:, :6]),
        dnp.einsum("ij->j", x), dnp.einsum("i,j", v, v), dnp.inner(x, x), dnp.vdot(x, x), dnp.dot(x, 2.0),
        dnp.sort(x, 0), dnp.argsort(x, None), dnp.concatenate([x, x], 1), dnp.linalg.svd(x, False)[0],
    ]
    for r in results:
        r.persist().wait()
    monkeypatch.undo()
    same(results[6], np.column_stack([np.arange(8.0), a.T]))
