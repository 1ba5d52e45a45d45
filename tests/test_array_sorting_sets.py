"""dgvm.array's sorting, searching and set functions against NumPy, on real clusters:
one block and several (uneven) blocks along the sorted axis, int, float (NaN, -0.0) and
bool data, every axis, descending, stability on repeated values; hypothesis draws
shapes, chunkings and data for the property tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dgvm.array as dnp
from dgvm.array._engine import sort_splits

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def data(shape, dtype, seed=0, distinct=7):
    """Values with many repeats; floats also hold NaN and both zeros."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, distinct, size=shape)
    if dtype == "bool":
        return a % 2 == 1
    if np.dtype(dtype).kind == "c":  # repeats in both parts, NaN in either or both
        out = np.empty(shape, dtype)
        out.real, out.imag = data(shape, "float64", seed, distinct), data(shape, "float64", seed + 1, distinct)
        return out
    a = a.astype(dtype)
    if np.dtype(dtype).kind == "f":
        a[a == 3] = np.nan
        a[a == 2] = -0.0
        a[a == 1] = np.inf
    return a


def ref_argsort(a, axis, descending):
    """The standard's stable order: descending keeps ties in order; NaN sort as largest."""
    if not descending:
        return np.argsort(a, axis=axis, kind="stable")
    flipped = np.argsort(np.flip(a, axis=axis), axis=axis, kind="stable")
    return a.shape[axis] - 1 - np.flip(flipped, axis=axis)


def ref_sort(a, axis, descending):
    return np.take_along_axis(a, ref_argsort(a, axis, descending), axis=axis)


def check_sorts(x, a, axis, descending):
    s = dnp.sort(x, axis=axis, descending=descending)
    i = dnp.argsort(x, axis=axis, descending=descending)
    assert s.chunks == x.chunks and i.chunks == x.chunks
    got_s, got_i = dnp.asnumpy(s), dnp.asnumpy(i)
    assert got_s.dtype == a.dtype and got_i.dtype == np.int64
    np.testing.assert_array_equal(got_s, ref_sort(a, axis, descending))
    np.testing.assert_array_equal(got_i, ref_argsort(a, axis, descending))
    return s, i


CASES = [  # shape, chunks, axis, dtype
    ((60,), (60,), 0, "float64"),  # one block
    ((103,), (20,), 0, "float64"),  # several, uneven
    ((103,), (20,), 0, "int32"),
    ((37, 53), (10, 20), 0, "bool"),
    ((37, 53), (37, 20), -1, "float32"),
    ((6, 7, 8), (2, 3, 3), 1, "uint8"),
    ((101,), (17,), 0, "complex128"),
    ((9, 40), (4, 11), -1, "complex64"),
]


@pytest.mark.parametrize("shape,chunks,axis,dtype", CASES)
def test_sort_and_argsort_match_numpy(case, shape, chunks, axis, dtype):
    a = data(shape, dtype, seed=len(shape))
    x = dnp.from_numpy(a, chunks=chunks)
    for descending in (False, True):
        s, _ = check_sorts(x, a, axis, descending)
    assert s.locations() == x.locations()  # the result lives where the input does


def test_sort_over_many_blocks_in_several_rounds(case, monkeypatch):
    """Tiny samples force the splits through several rounds of narrowing; ties (few
    distinct values) across blocks must keep their original order."""
    monkeypatch.setattr(sort_splits, "SAMPLES", 2)
    monkeypatch.setattr(sort_splits, "WINDOW", 2)
    monkeypatch.setattr(sort_splits, "BUDGET", 1)
    a = data((250,), "float64", seed=3, distinct=5)
    x = dnp.from_numpy(a, chunks=(37,))
    for descending in (False, True):
        check_sorts(x, a, 0, descending)
    b = data((41, 9), "int16", seed=4, distinct=4)
    check_sorts(dnp.from_numpy(b, chunks=(9, 4)), b, 0, True)


def test_argsort_is_stable_on_repeated_values(case):
    a = np.repeat(np.array([5, 1, 5, 3, 1]), 40).reshape(-1)
    np.random.default_rng(0).shuffle(a)
    x = dnp.from_numpy(a, chunks=(23,))
    for descending in (False, True):
        i = dnp.asnumpy(dnp.argsort(x, descending=descending, stable=True))
        np.testing.assert_array_equal(i, ref_argsort(a, 0, descending))
        for v in (1, 3, 5):  # equal values come in their original order
            pos = i[a[i] == v]
            assert (np.diff(pos) > 0).all()


@st.composite
def sort_case(draw):
    ndim = draw(st.integers(1, 2))
    shape = tuple(draw(st.integers(1, 30 if ndim == 1 else 9)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, s)) for s in shape)
    axis = draw(st.integers(-ndim, ndim - 1))
    dtype = draw(st.sampled_from(["float64", "int8", "uint16", "bool", "float32", "complex128"]))
    return shape, chunks, axis, dtype, draw(st.integers(1, 12)), draw(st.booleans())


@SETTINGS
@given(c=sort_case(), seed=st.integers(0, 99))
def test_sort_property(case, c, seed):
    shape, chunks, axis, dtype, distinct, descending = c
    a = data(shape, dtype, seed, distinct)
    check_sorts(dnp.from_numpy(a, chunks=chunks), a, axis, descending)


def test_sort_errors(case):
    x = dnp.from_numpy(np.arange(6.0).reshape(2, 3))
    with pytest.raises(np.exceptions.AxisError, match="axis 2"):
        dnp.sort(x, axis=2)
    with pytest.raises(TypeError, match="expects a DArray"):
        dnp.argsort(np.ones(3))
    with pytest.raises(ValueError, match="0-d"):
        dnp.sort(dnp.from_numpy(np.float64(1.0)))
    with pytest.raises(TypeError, match="axis must be an int"):
        dnp.sort(x, axis=1.0)
    # NumPy's axis=None: the flattened array
    np.testing.assert_array_equal(dnp.asnumpy(dnp.sort(x, axis=None)), np.sort(np.arange(6.0).reshape(2, 3), axis=None))


# -- searching ---------------------------------------------------------------------------

def test_searchsorted_matches_numpy(case):
    rng = np.random.default_rng(1)
    a = np.sort(rng.integers(0, 50, 200)).astype(np.float64)
    a[-5:] = np.nan
    b = rng.integers(-3, 55, (13, 17)).astype(np.float64)
    b[0, :3] = np.nan
    x1, x2 = dnp.from_numpy(a, chunks=(30,)), dnp.from_numpy(b, chunks=(5, 6))
    for side in ("left", "right"):
        got = dnp.searchsorted(x1, x2, side=side)
        assert got.chunks == x2.chunks and got.dtype == np.int64
        np.testing.assert_array_equal(dnp.asnumpy(got), np.searchsorted(a, b, side=side))
    # integers searched among integers, one block
    ai = np.arange(0, 40, 3)
    bi = rng.integers(-2, 45, 25)
    got = dnp.searchsorted(dnp.from_numpy(ai), dnp.from_numpy(bi, chunks=(7,)), side="right")
    np.testing.assert_array_equal(dnp.asnumpy(got), np.searchsorted(ai, bi, side="right"))
    # sorter: x1 unsorted
    u = a[rng.permutation(len(a))]
    order = np.argsort(u, kind="stable")
    sorter = dnp.from_numpy(order, chunks=(70,))
    got = dnp.searchsorted(dnp.from_numpy(u, chunks=(40,)), x2, sorter=sorter)
    np.testing.assert_array_equal(dnp.asnumpy(got), np.searchsorted(u, b, sorter=order))


def test_searchsorted_errors(case):
    x1 = dnp.from_numpy(np.arange(6).reshape(2, 3))
    x2 = dnp.from_numpy(np.arange(3))
    with pytest.raises(ValueError, match="1-d"):
        dnp.searchsorted(x1, x2)
    with pytest.raises(ValueError, match="side"):
        dnp.searchsorted(x2, x2, side="middle")
    with pytest.raises(IndexError, match="sorter"):
        dnp.searchsorted(x2, x2, sorter=dnp.from_numpy(np.array([0, 1, 7])))


@pytest.mark.parametrize("shape,chunks", [((100,), (30,)), ((13, 17), (5, 6)), ((4, 5, 6), (2, 5, 3))])
def test_nonzero_and_count_nonzero(case, shape, chunks):
    rng = np.random.default_rng(len(shape))
    a = (rng.random(shape) < 0.3) * rng.integers(1, 9, shape)
    a.flat[-1] = 0
    for arr in (a, a.astype(bool), np.where(a == 2, np.nan, a * 0.5)):
        x = dnp.from_numpy(arr, chunks=chunks)
        got = dnp.nonzero(x)
        want = np.nonzero(arr)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == np.int64
            np.testing.assert_array_equal(dnp.asnumpy(g), w)
    for axis in (None, 0, -1, tuple(range(len(shape)))):
        for keepdims in (False, True):
            np.testing.assert_array_equal(
                dnp.asnumpy(dnp.count_nonzero(x, axis=axis, keepdims=keepdims)),
                np.count_nonzero(arr, axis=axis, keepdims=keepdims))


def test_nonzero_of_nothing_is_empty_and_of_a_scalar_a_clear_error(case):
    rows, cols = dnp.nonzero(dnp.zeros((4, 5), chunks=(2, 2)))
    assert rows.shape == cols.shape == (0,) and rows.dtype == cols.dtype == np.int64
    with pytest.raises(ValueError, match="0-d"):
        dnp.nonzero(dnp.from_numpy(np.float64(3.0)))
    assert int(dnp.count_nonzero(dnp.zeros((4, 5), chunks=(2, 2)))) == 0


# -- sets ------------------------------------------------------------------------------------

def check_unique(x, a, every=True):
    """The functions against NumPy 2: every NaN distinct, values sorted (NumPy's
    ``unique_values`` may not sort; its ``unique_inverse`` numbers NaNs in no set order,
    ``unique_all`` in flat order, as dgvm does)."""
    want = np.unique_all(a)
    got = dnp.unique_all(x)
    assert got._fields == ("values", "indices", "inverse_indices", "counts")
    for field in got._fields:
        g, w = dnp.asnumpy(getattr(got, field)), getattr(want, field)
        assert g.dtype == w.dtype, field
        np.testing.assert_array_equal(g, w, err_msg=field)
    assert got.inverse_indices.chunks == x.chunks
    np.testing.assert_array_equal(dnp.asnumpy(dnp.unique_values(x)), np.unique(a, equal_nan=False))
    if not every:
        return
    counts = dnp.unique_counts(x)
    np.testing.assert_array_equal(dnp.asnumpy(counts.counts), want.counts)
    inverse = dnp.unique_inverse(x)
    np.testing.assert_array_equal(dnp.asnumpy(inverse.inverse_indices), want.inverse_indices)
    np.testing.assert_array_equal(dnp.asnumpy(inverse.values), want.values)


@pytest.mark.parametrize("shape,chunks,dtype", [
    ((50,), (50,), "float64"), ((13, 17), (5, 6), "float64"), ((13, 17), (5, 6), "int16"),
    ((3, 4, 5), (2, 3, 2), "bool"),
])
def test_unique_functions_match_numpy(case, shape, chunks, dtype):
    a = data(shape, dtype, seed=len(shape))
    check_unique(dnp.from_numpy(a, chunks=chunks), a)


def test_unique_of_all_nan_and_distinct_values(case):
    a = np.full((7, 3), np.nan)
    check_unique(dnp.from_numpy(a, chunks=(3, 2)), a)
    b = np.random.default_rng(5).permutation(300).astype(np.float32)
    check_unique(dnp.from_numpy(b, chunks=(41,)), b)


@SETTINGS
@given(c=sort_case(), seed=st.integers(0, 99))
def test_unique_property(case, c, seed):
    shape, chunks, _, dtype, distinct, _ = c
    a = data(shape, dtype, seed, distinct)
    check_unique(dnp.from_numpy(a, chunks=chunks), a, every=False)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_unique_of_complex_values_in_numpys_order(case, dtype):
    """Complex values order as NumPy's: (real, imaginary), those with a NaN part last,
    by which part is NaN; each of those is distinct."""
    a = data((13, 17), dtype, seed=2, distinct=4)
    assert np.isnan(a.real).any() and np.isnan(a.imag).any() and (a.real == -0.0).any()
    check_unique(dnp.from_numpy(a, chunks=(5, 6)), a)


def test_complex_sorts_and_searches_in_numpys_order(case):
    a = np.sort(data((50,), "complex128", seed=4, distinct=5))
    v = data((20,), "complex128", seed=6, distinct=6)
    x1, x2 = dnp.from_numpy(a, chunks=7), dnp.from_numpy(v, chunks=6)
    for side in ("left", "right"):
        np.testing.assert_array_equal(dnp.asnumpy(dnp.searchsorted(x1, x2, side=side)), np.searchsorted(a, v, side=side))


def test_the_complex_order_of_backends_without_numpys_sort():
    # On cpu NumPy's own stable sort gives the complex order; other backends (CuPy) sort
    # one real key at a time. That path, run here on NumPy behind a module of its own:
    import types

    from dgvm.array._engine.sort_keys import stable_argsort

    xp = types.SimpleNamespace(**{n: getattr(np, n) for n in (
        "where", "isnan", "asarray", "real", "imag", "take_along_axis", "flip")})
    xp.argsort = lambda k, axis=-1: np.argsort(k, axis=axis, kind="stable")  # CuPy's are stable
    rng = np.random.default_rng(3)
    parts = np.array([np.nan, -np.inf, -1.0, -0.0, 0.0, 2.0, np.inf])
    for dtype in (np.complex64, np.complex128):
        k = (rng.choice(parts, (3, 60)) + 1j * rng.choice(parts, (3, 60))).astype(dtype)
        np.testing.assert_array_equal(stable_argsort(k, xp), np.argsort(k, axis=-1, kind="stable"))


@pytest.mark.parametrize("dtype", ["float64", "int16", "bool"])
def test_counts_before_agree_on_every_backend(dtype):
    # On cpu the counts of the splits and searches come from NumPy's own searchsorted, a
    # row at a time; other backends (CuPy) run one vectorized binary search. Both agree,
    # ascending and descending, level or not, with NaN and both zeros among the keys.
    import types

    from dgvm.array._engine.sort_keys import count_before, sort_key

    xp = types.SimpleNamespace(**{n: getattr(np, n) for n in (
        "where", "isnan", "asarray", "take", "arange", "zeros", "full", "minimum")})
    for descending in (False, True):
        lines = sort_key(data((4, 40), dtype, seed=5, distinct=6), np)
        lines = np.flip(np.sort(lines, axis=1), axis=1) if descending else np.sort(lines, axis=1)
        queries = sort_key(data((4, 25), dtype, seed=6, distinct=8), np)
        level = np.random.default_rng(7).random((1, 25)) < 0.5
        for inclusive in (False, True, level):
            np.testing.assert_array_equal(count_before(lines, queries, inclusive, descending, np),
                                          count_before(lines, queries, inclusive, descending, xp))
