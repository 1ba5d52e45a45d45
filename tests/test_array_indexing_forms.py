"""The indexing forms NumPy has beyond basic slicing, against NumPy element for element
on real clusters: boolean masks of some of the leading (or inner) axes, read and
written (``x[m]``, ``x[:, m]``, ``x[0, m]``, ``x[m] = v``); arrays assigned through a
mask (``x[mask] = values``, one per true position in C order, or broadcast); and
assignments through a DArray of integer indices (``x[idx] = v``, negative and repeated
indices, out of bounds). Masks and indices as DArrays and as host arrays, chunkings
whose selections cross chunk boundaries, views as targets, arrays with no elements,
NumPy's errors; and what must not happen: the mask, the indices or the values read to
the caller, or carried in a task graph."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import dgvm.array as dnp
from dgvm.array._engine import index_assign
from dgvm.client.allocation import AllocationHandle

SHAPE = (6, 7, 5)
CHUNKINGS = [(4, 7, 5), (4, 3, 2), (1, 7, 3)]  # whole rows, cut everywhere, cut rows of single lines


def same(got, want):
    got = dnp.asnumpy(got) if isinstance(got, dnp.DArray) else np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


def values(shape, seed=0, dtype="float64"):
    return (np.random.default_rng(seed).random(shape) * 100).astype(dtype)


def masks(shape, seed=0):
    """A mask with about half its elements true, an all-false and an all-true one."""
    rng = np.random.default_rng(seed)
    return [rng.random(shape) < 0.5, np.zeros(shape, bool), np.ones(shape, bool)]


def as_darray(m, chunks=2):
    return dnp.from_numpy(m, chunks=chunks)


def assigned(a, chunks, key, value, darray_key=None, darray_value=False):
    """(dgvm's array after ``x[key] = value``, NumPy's)."""
    want = a.copy()
    want[key] = value
    x = dnp.from_numpy(a, chunks=chunks)
    v = dnp.from_numpy(np.asarray(value), chunks=3) if darray_value else value
    x[key if darray_key is None else darray_key] = v
    return x, want


def with_darrays(key, chunks=2):
    """``key`` with its arrays as DArrays."""
    items = key if isinstance(key, tuple) else (key,)
    out = tuple(as_darray(k, chunks) if isinstance(k, np.ndarray) else k for k in items)
    return out if isinstance(key, tuple) else out[0]


# -- 1. masks of some of the axes, read ---------------------------------------------------------
M01 = masks(SHAPE[:2], seed=1)  # axes 0 and 1
M12 = masks(SHAPE[1:], seed=2)  # axes 1 and 2
READ_KEYS = [
    lambda m01, m12: m01,
    lambda m01, m12: (m01, Ellipsis),
    lambda m01, m12: (m01, slice(1, 4)),
    lambda m01, m12: (m01, 3),  # the integer beside the mask
    lambda m01, m12: (slice(None), m12),
    lambda m01, m12: (Ellipsis, m12),
    lambda m01, m12: (slice(5, 0, -2), m12),
    lambda m01, m12: (2, m12),
    lambda m01, m12: (None, m01),
    lambda m01, m12: (slice(None), None, m12),
]


@pytest.mark.parametrize("chunks", CHUNKINGS)
def test_masks_of_some_axes_select_as_numpy(case, chunks):
    a = values(SHAPE, seed=3)
    x = dnp.from_numpy(a, chunks=chunks)
    for j, (m01, m12) in enumerate(zip(M01, M12)):
        for i, make in enumerate(READ_KEYS):
            key = make(m01, m12)
            # The all-false and all-true masks (j = 1, 2) are given as host arrays and as
            # DArrays by turns: each key meets each form with one of them, each of them
            # meets each form with five keys.
            if j == 0 or (i + j) % 2:
                same(x[key], a[key])
            if j == 0 or not (i + j) % 2:
                same(x[with_darrays(key, chunks=2 if i % 2 else (5, 3))], a[key])


def test_a_mask_apart_from_an_integer_puts_its_axis_first(case):
    """NumPy: an integer and a mask not side by side put the selected elements' axis
    first."""
    a = values((3, 4, 5, 6), seed=4)
    x = dnp.from_numpy(a, chunks=(2, 3, 2, 4))
    m, m1 = masks((5, 6), seed=5)[0], masks(4, seed=5)[0]
    for key in [(0, slice(None), m), (0, None, m1), (0, None, m1, 2)]:
        same(x[key], a[key])
        same(x[with_darrays(key)], a[key])


def test_masks_read_views_and_deferred_arrays(case):
    a = values(SHAPE, seed=6)
    x = dnp.from_numpy(a, chunks=(4, 3, 2))
    m = M01[0][1:]
    same(x[1:][m], a[1:][m])
    same(x[1:][as_darray(m)], a[1:][m])
    same((x + 1)[M01[0]], (a + 1)[M01[0]])
    same(x[x[:, :, 0] > 50], a[a[:, :, 0] > 50])  # a DArray mask computed from x


def test_masks_of_arrays_with_no_elements(case):
    a = np.zeros((4, 0, 3))
    x = dnp.zeros((4, 0, 3))
    m = np.array([True, False, True, True])
    same(x[m], a[m])
    same(x[np.zeros((4, 0), bool)], a[np.zeros((4, 0), bool)])
    b = values((4, 5, 0), seed=7)
    y = dnp.from_numpy(b)
    m2 = masks((4, 5), seed=8)[0]
    same(y[m2], b[m2])
    same(y[as_darray(m2)], b[m2])


# -- 1. masks of some of the axes, written -------------------------------------------------------
@pytest.mark.parametrize("chunks", CHUNKINGS)
def test_masks_of_some_axes_assign_as_numpy(case, chunks):
    a = values(SHAPE, seed=9)
    for j, (m01, m12) in enumerate(zip(M01, M12)):
        n01, n12 = int(m01.sum()), int(m12.sum())
        cases = [
            (m01, -1.0), (m01, np.arange(5.0)),  # a scalar, a row broadcast over the selection
            (m01, np.arange(n01 * 5.0).reshape(n01, 5)),  # one row per true position
            (m01, np.ones((1, 1))),
            ((slice(None), m12), np.arange(6 * n12 * 1.0).reshape(6, n12)),
            ((slice(None), m12), np.arange(6.0).reshape(6, 1)),
            ((Ellipsis, m12), 7.0),
            ((2, m12), np.arange(n12 * 1.0)),
            ((slice(1, 5), m12), np.arange(n12 * 1.0)),
        ]
        for i, (key, value) in enumerate(cases):
            # As in the reads, the all-false and all-true masks (j = 1, 2) take the host
            # and the DArray forms of the key by turns; by pairs of cases, so that each
            # form of the key meets host and DArray values with each of them.
            turn = (i // 2 + j) % 2
            if j == 0 or turn:
                got, want = assigned(a, chunks, key, value, darray_value=i % 2 and np.ndim(value) > 0)
                same(got, want)
            if j == 0 or not turn:
                got, want = assigned(a, chunks, key, value, darray_key=with_darrays(key, (4, 2)),
                                     darray_value=not i % 2 and np.ndim(value) > 0)
                same(got, want)


def test_a_mask_apart_from_an_integer_takes_values_in_numpys_order(case):
    a = values((3, 4, 5, 6), seed=10)
    m = masks((5, 6), seed=11)[0]
    n = int(m.sum())
    value = np.arange(n * 4.0).reshape(n, 4)  # NumPy's selection: (n, 4)
    for darray_value in (False, True):
        got, want = assigned(a, (2, 3, 2, 4), (0, slice(None), m), value, darray_value=darray_value)
        same(got, want)
        got, want = assigned(a, (2, 3, 2, 4), (0, slice(None), m), value,
                             darray_key=(0, slice(None), as_darray(m)), darray_value=darray_value)
        same(got, want)


# -- 2. arrays assigned through a mask of the whole shape -----------------------------------------
FULL_CASES = [  # shape, chunks
    ((40,), (7,)),
    ((12, 9), (5, 9)),  # whole rows
    ((12, 9), (5, 4)),  # rows cut along the last axis
    ((6, 7, 5), (4, 3, 2)),
    ((6, 7, 5), (6, 2, 5)),  # cut only along a middle axis
]


@pytest.mark.parametrize("shape,chunks", FULL_CASES)
def test_a_mask_takes_one_value_per_true_position(case, shape, chunks):
    a = values(shape, seed=12)
    for m in masks(shape, seed=13):
        n = int(m.sum())
        host, darray, other = m, dnp.from_numpy(m, chunks=chunks), dnp.from_numpy(m, chunks=3)
        for key, value, darray_value in [
            (host, np.arange(n, dtype=np.float64) + 0.5, False),
            (darray, np.arange(n, dtype=np.float64) + 0.5, True),
            (other, np.arange(n, dtype=np.int32), True),
            (host, np.arange(n, dtype=np.int32), True),
            (darray, np.array([3.0]), False),
            (other, np.array([3.0]), True),
        ]:
            got, want = assigned(a, chunks, m, value, darray_key=key, darray_value=darray_value)
            same(got, want)


def test_a_mask_takes_values_computed_from_the_array(case):
    """``x[x > t] = f(x[x > t])``: values read where the chunks live, from x itself."""
    a = values((30, 20), seed=14)
    x = dnp.from_numpy(a, chunks=(7, 6))
    m = x > 40
    x[m] = x[m] * 2
    a[a > 40] = a[a > 40] * 2
    same(x, a)
    y = dnp.from_numpy(a[0], chunks=6)
    y[y > 0] = y  # every element true: x itself, read before it is written
    same(y, a[0])


def test_views_as_targets_of_masks(case):
    a = values((9, 8), seed=15)
    x = dnp.from_numpy(a, chunks=(4, 3))
    v = x[1:]
    m = masks((8, 8), seed=16)[0]
    v[m] = 3
    a[1:][m] = 3
    same(x, a)
    w = x[:, ::2]
    mw = masks((9, 4), seed=17)[0]
    w[as_darray(mw)] = np.arange(int(mw.sum()), dtype=np.float64)
    a[:, ::2][mw] = np.arange(int(mw.sum()), dtype=np.float64)
    same(x, a)
    r = x[2:7]
    r[mw[:5, :1].repeat(8, axis=1)[:, :1].reshape(5)] = np.arange(8.0)  # a 1-d mask of a 2-d view
    a[2:7][mw[:5, 0]] = np.arange(8.0)
    same(x, a)


def test_mask_assignment_errors_are_numpys(case):
    a = values((6, 5), seed=18)
    x = dnp.from_numpy(a, chunks=(4, 2))
    m = masks((6, 5), seed=19)[0]
    n = int(m.sum())
    for key in (m, as_darray(m)):
        with pytest.raises(ValueError, match=f"cannot assign 3 input values to the {n} output values"):
            x[key] = np.arange(3.0)
        with pytest.raises(ValueError, match=f"cannot assign 3 input values to the {n} output values"):
            x[key] = dnp.arange(3.0)
        with pytest.raises(TypeError, match="0 or 1-dimensional input"):
            x[key] = np.ones((1, n))
        with pytest.raises(IndexError, match="boolean index did not match"):
            x[np.ones((5, 5), bool)] = 1.0
        with pytest.raises(IndexError, match="boolean index did not match"):
            x[as_darray(np.ones((6, 4), bool))] = np.arange(3.0)
        with pytest.raises(IndexError, match="too many indices"):
            x[np.ones((6, 5, 1), bool)] = 1.0
    with pytest.raises(ValueError):
        x[m[:, 0]] = np.arange(3.0)  # (rows, 5) selected: a value of 3 does not broadcast
    with pytest.raises(IndexError, match="boolean index did not match"):
        x[np.ones(4, bool)]
    same(x, a)  # nothing was written


def test_masks_with_nothing_to_write(case):
    a = values((6, 5), seed=20)
    x = dnp.from_numpy(a, chunks=(4, 2))
    none = np.zeros((6, 5), bool)
    x[none] = np.zeros(0)
    x[as_darray(none)] = 1.0
    x[as_darray(none[:, 0])] = np.ones(5)
    same(x, a)
    with pytest.raises(ValueError, match="cannot assign 2 input values to the 0 output values"):
        x[as_darray(none)] = np.ones(2)
    some = none.copy()
    some[1, 1] = True
    with pytest.raises(ValueError, match="cannot assign 0 input values to the 1 output values"):
        x[as_darray(some)] = dnp.zeros(0)  # a value with no elements, a mask with one true
    with pytest.raises(ValueError):
        x[as_darray(some[:, 1])] = dnp.zeros((0, 5))
    x[as_darray(none)] = dnp.zeros(0)
    y = dnp.zeros((0, 5))
    y[np.zeros((0, 5), bool)] = 1.0
    y[np.zeros(0, bool)] = np.ones(5)
    same(y, np.zeros((0, 5)))


# -- 3. assignments through a DArray of integer indices -------------------------------------------
def indices(n, size, seed=0):
    """Unsorted, repeated and negative indices into an axis of length n."""
    rng = np.random.default_rng(seed)
    v = rng.integers(-n, n, size)
    v[: min(3, size)] = v[0]  # repeats
    return v


INDEX_CASES = [  # shape, chunks, index chunks
    ((40,), (7,), 5),
    ((12, 9), (5, 4), 3),
    ((6, 7, 5), (4, 3, 2), 4),
]


@pytest.mark.parametrize("shape,chunks,ichunks", INDEX_CASES)
def test_darray_indices_assign_as_numpy(case, shape, chunks, ichunks):
    a = values(shape, seed=21)
    for axis in range(len(shape)):
        n = shape[axis]
        idx = indices(n, 11, seed=axis)
        d = dnp.from_numpy(idx, chunks=ichunks)
        lead = (slice(None),) * axis
        sel = shape[:axis] + (len(idx),) + shape[axis + 1:]
        whole = np.arange(int(np.prod(sel)), dtype=np.float64).reshape(sel)
        for value in [-1.0, whole, whole[(slice(None),) * axis + (slice(0, 1),)], np.arange(sel[-1] * 1.0)]:
            for darray_value in (False, True):
                dv = darray_value and np.ndim(value) > 0
                got, want = assigned(a, chunks, lead + (idx,), value, darray_key=lead + (d,), darray_value=dv)
                same(got, want)
        if len(shape) > 1:  # other indices beside the array
            key = lead + (idx, 0) if axis + 1 < len(shape) else (1,) * axis + (idx,)
            dkey = tuple(d if k is idx else k for k in key)
            got, want = assigned(a, chunks, key, 5.0, darray_key=dkey)
            same(got, want)


def test_repeated_indices_the_last_one_wins(case):
    a = np.zeros(20)
    x = dnp.from_numpy(a, chunks=6)
    idx = np.array([3, 15, 3, -17, 7, 15, 8])
    x[dnp.from_numpy(idx, chunks=2)] = np.arange(7.0)
    a[idx] = np.arange(7.0)  # 3 (and -17) written three times, 15 twice: the last value
    same(x, a)
    y = dnp.from_numpy(np.zeros(20), chunks=6)
    y[dnp.from_numpy(idx, chunks=2)] += 1  # NumPy's: not accumulated
    b = np.zeros(20)
    b[idx] += 1
    same(y, b)


def test_many_indices_over_many_blocks_read_longer_runs(case, monkeypatch):
    """Past ``MAX_HITS`` (runs, blocks) pairs the runs grow (each chunk then reads more
    indices than it writes): the same result."""
    monkeypatch.setattr(index_assign, "MAX_HITS", 16)
    a = values(60, seed=28)
    x = dnp.from_numpy(a, chunks=7)  # 9 blocks: runs of at least 60 * 9 / 16 indices
    idx = indices(60, 200, seed=5)
    x[dnp.from_numpy(idx, chunks=45)] = np.arange(200.0)
    a[idx] = np.arange(200.0)
    same(x, a)


def test_indices_apart_from_an_integer_take_values_in_numpys_order(case):
    a = values((3, 4, 5), seed=22)
    idx = np.array([4, 0, -2])
    value = np.arange(12.0).reshape(3, 4)  # NumPy's selection: (3, 4)
    for key in [(0, slice(None), idx), (0, slice(None), dnp.from_numpy(idx, chunks=2))]:
        got, want = assigned(a, (2, 3, 2), (0, slice(None), idx), value, darray_key=key)
        same(got, want)


def test_darray_indices_into_views_and_from_masks(case):
    a = values((10, 6), seed=23)
    x = dnp.from_numpy(a, chunks=(4, 4))
    v = x[2:, ::2]
    idx = np.array([0, -1, 3])
    v[dnp.from_numpy(idx)] = 9.0
    a[2:, ::2][idx] = 9.0
    same(x, a)
    m = a[:, 0] > 50  # a 1-d DArray mask along axis 0: the positions it stands for
    x[dnp.from_numpy(m, chunks=3)] = np.arange(6.0)
    a[m] = np.arange(6.0)
    same(x, a)
    x[:, dnp.from_numpy(a[0] > 50, chunks=4)] = -2.0
    a[:, a[0] > 50] = -2.0
    same(x, a)
    cols = np.array([5, -6, 2, 5])
    value = np.arange(20.0).reshape(5, 4)
    x[::-2, dnp.from_numpy(cols, chunks=3)] = value  # a reversed slice beside the indices
    a[::-2, cols] = value
    same(x, a)


def test_out_of_bounds_indices_write_nothing(case):
    a = values((10, 6), seed=24)
    x = dnp.from_numpy(a, chunks=(4, 4))
    for key, value in [((np.array([0, 3, 10]),), np.ones(6)), ((np.array([-11, 2]),), 1.0),
                       ((slice(None), np.array([5, 6])), np.ones((10, 2))), ((slice(None), np.array([1, -7])), 2.0)]:
        darray_key = tuple(dnp.from_numpy(k, chunks=1) if isinstance(k, np.ndarray) else k for k in key)
        for k in (key, darray_key):
            with pytest.raises(IndexError, match="out of bounds"):
                x[k] = value
    same(x, a)
    with pytest.raises(IndexError, match="integer array indices"):
        x[dnp.from_numpy(np.array([1.0, 2.0]))] = 1.0
    with pytest.raises(ValueError):
        x[dnp.from_numpy(np.array([1, 2]))] = np.ones((3, 6))
    same(x, a)


def test_empty_index_arrays(case):
    a = values((5, 4), seed=25)
    x = dnp.from_numpy(a, chunks=2)
    x[dnp.from_numpy(np.zeros(0, np.int64))] = 1.0
    x[:, dnp.from_numpy(np.zeros(0, np.int64))] = np.ones((5, 0))
    same(x, a)


# -- what must not happen -------------------------------------------------------------------------
LIMIT = 16 * 1024  # bytes: no task's arguments, no result brought back, reach it


@pytest.fixture
def on_workers(monkeypatch, task_sizes):
    """A context in which at most a few elements of arrays are read to the caller, and
    after which no task dgvm submitted may have carried, nor any result it brought back
    have held, ``LIMIT`` bytes or more (pickled)."""
    state = {"on": False, "read": 0}
    get = AllocationHandle.get

    def counted(self, pieces):
        if state["on"]:
            state["read"] += sum(n for _, _, n in pieces)
        return get(self, pieces)

    monkeypatch.setattr(AllocationHandle, "get", counted)

    @contextlib.contextmanager
    def scope():
        state.update(on=True, read=0)
        try:
            with task_sizes.recording():
                yield
        finally:
            state["on"] = False
        assert state["read"] <= 64, f"{state['read']} bytes of arrays were read on the caller"
        task_sizes.check(LIMIT)

    return scope


def test_mask_values_never_pass_through_the_caller(case, on_workers):
    """Masks of ~50,000 true positions of arrays of 100,000 (800 kB): the mask, the
    values and the selection stay on the workers (form 1 and form 2)."""
    a = values((400, 250), seed=26)
    want = a.copy()
    x = dnp.from_numpy(a, chunks=(100, 100))
    m = x < 50
    n = int((a < 50).sum())
    v = dnp.arange(n, dtype=dnp.float64)
    xr = dnp.from_numpy(a, chunks=(50, 250))
    with on_workers():
        xr[xr < 50] = v  # whole rows: one run of values per chunk
        x[m] = v  # rows cut: per-line counts
        y = x[:, :200]
        y[y > 80] = y[y > 80] + 1  # form 2 on a view
        w = x[m[:, 0]]  # form 1, a 1-d DArray mask (the positions, gathered)
        x3 = dnp.reshape(x, (400, 50, 5))
        z = x3[m[:, :50]]  # form 1, a mask of the two leading axes
        x3[m[:, :50]] = 0.0
        x.wait()
    want[a < 50] = np.arange(n)
    same(xr, want)
    sub = want[:, :200]
    sub[sub > 80] += 1
    same(w, want[a[:, 0] < 50])
    same(z, want.reshape(400, 50, 5)[(a < 50)[:, :50]])
    want.reshape(400, 50, 5)[(a < 50)[:, :50]] = 0.0
    same(x, want)


def test_index_arrays_never_pass_through_the_caller_when_assigned(case, on_workers):
    """Indices of 40,000 entries (320 kB) assigned through: no task's arguments and no
    result brought back grow with them, and neither they nor the values are read here."""
    a = values((400, 250), seed=27)
    want = a.copy()
    x = dnp.from_numpy(a, chunks=(100, 100))
    idx = indices(400, 40_000, seed=3)
    d = dnp.from_numpy(idx, chunks=10_000)
    cols = dnp.from_numpy(indices(250, 40_000, seed=4), chunks=8_000)
    vals = dnp.from_numpy(np.arange(40_000 * 250.0).reshape(40_000, 250), chunks=(10_000, 250))
    with on_workers():
        x[d] = 1.0
        x[:, cols] = -1.0
        x[d[:400]] = vals[:400]
        x[d[::7]] += 1
        x.wait()
    want[idx] = 1.0
    want[:, indices(250, 40_000, seed=4)] = -1.0
    want[idx[:400]] = np.arange(40_000 * 250.0).reshape(40_000, 250)[:400]
    want[idx[::7]] += 1
    same(x, want)
