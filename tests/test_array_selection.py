"""Masks and integer gathers against NumPy, on real clusters, computed where the chunks
live: ``x[mask]`` for masks of every shape of array (all false, all true, host, DArray of
other chunks, deferred), ``x[idx]`` and ``take`` with host and DArray indices (negative,
repeated, unsorted, along every axis, with NumPy's placement of the gathered axis);
and what must not happen: an index array or a mask's positions gathered to the caller,
or a task graph that carries data growing with the array."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dgvm.array as dnp
from dgvm.array._engine.core import ArrayCore

SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def same(got, want):
    got = dnp.asnumpy(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def values(shape, seed=0, dtype="float64"):
    return np.random.default_rng(seed).random(shape).astype(dtype)


LIMIT = 16 * 1024  # bytes: no task's arguments, no partial result brought back, reach it


@pytest.fixture
def on_workers(monkeypatch, task_sizes):
    """A context in which no DArray of more than one element may be read to the caller,
    and after which no task dgvm submitted may have carried, nor any result it brought
    back have held, ``LIMIT`` bytes or more (pickled)."""
    state = {"on": False}

    def refuse(self):
        if state["on"] and self.size > 1:
            raise AssertionError(f"a {self.shape} {self.dtype} DArray was read to the caller")
        return real_to_numpy(self)

    real_to_numpy = ArrayCore.to_numpy
    monkeypatch.setattr(ArrayCore, "to_numpy", refuse)

    @contextlib.contextmanager
    def scope():
        state["on"] = True
        try:
            with task_sizes.recording():
                yield
        finally:
            state["on"] = False
        task_sizes.check(LIMIT)

    return scope


# -- masks -------------------------------------------------------------------------------
MASK_CASES = [  # shape, chunks
    ((50,), (7,)),
    ((23, 31), (23, 31)),  # one chunk
    ((23, 31), (5, 31)),  # whole rows
    ((23, 31), (5, 8)),  # rows cut along the last axis too
    ((23, 31), (23, 4)),
    ((6, 7, 9), (2, 3, 4)),
    ((6, 7, 9), (6, 2, 9)),  # cut only along a middle axis
    ((4, 1, 5, 3), (3, 1, 2, 2)),
]


@pytest.mark.parametrize("shape,chunks", MASK_CASES)
def test_masks_of_every_shape_match_numpy(case, shape, chunks, on_workers):
    a = values(shape, seed=len(shape))
    x = dnp.from_numpy(a, chunks=chunks)
    m = np.random.default_rng(1).random(shape) < 0.5
    other = dnp.from_numpy(m, chunks=tuple(max(1, c - 1) for c in chunks))
    got, want = [], []
    with on_workers():
        for cut in (0.0, 0.3, 0.97, 1.0):  # all true, most, few, none
            got.append(x[x >= cut])
            want.append(a[a >= cut])
        got += [x[m], x[other], x[(x > 0.2) & (x < 0.6)]]  # host, other chunks, deferred
        want += [a[m], a[m], a[(a > 0.2) & (a < 0.6)]]
    for g, w in zip(got, want):
        same(g, w)


@SETTINGS
@given(data=st.data())
def test_mask_property(case, data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 9)) for _ in range(ndim))
    chunks = tuple(data.draw(st.integers(1, s)) for s in shape)
    p = data.draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]))
    dtype = data.draw(st.sampled_from(["float64", "int32", "bool", "complex64"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    a = (rng.random(shape) * 10).astype(dtype)
    m = rng.random(shape) < p
    x = dnp.from_numpy(a, chunks=chunks)
    same(x[dnp.from_numpy(m, chunks=chunks)], a[m])


@pytest.mark.parametrize("p", [0.0, 0.4, 1.0])
def test_one_dimensional_masks_along_an_axis(case, p, on_workers):
    """A 1-d mask in a key selects along its axis, as its true positions would."""
    a = values((9, 8, 5), seed=4)
    x = dnp.from_numpy(a, chunks=(4, 3, 5))
    rng = np.random.default_rng(int(p * 10))
    m0, m1 = rng.random(9) < p, rng.random(8) < p
    d0, d1 = dnp.from_numpy(m0, chunks=4), dnp.from_numpy(m1, chunks=5)
    keys = [(m0,), (slice(None), m1), (m0, 2), (1, m1), (Ellipsis, m1, slice(1, 4)), (None, m0)]
    got, want = [], []
    with on_workers():
        for key in keys:
            darray_key = tuple(d0 if k is m0 else d1 if k is m1 else k for k in key)
            got += [x[key], x[darray_key]]
            want += [a[key]] * 2
    for g, w in zip(got, want):
        same(g, w)


def test_mask_errors(case):
    x = dnp.from_numpy(values((4, 5)), chunks=2)
    with pytest.raises(IndexError, match="boolean index"):
        x[dnp.from_numpy(np.ones((5, 4), bool))]
    with pytest.raises(IndexError, match="boolean index"):
        x[np.ones(20, bool)]


def test_a_masked_sum_matches_numpy(case, on_workers):
    a = values((40, 30), seed=3)
    x = dnp.from_numpy(a, chunks=(7, 9))
    with on_workers():
        total = float(x[x > 0.5].sum())
    np.testing.assert_allclose(total, a[a > 0.5].sum())


# -- integer gathers ---------------------------------------------------------------------
def indices(n, size, seed=0):
    """Unsorted, repeated and negative indices into an axis of length n."""
    rng = np.random.default_rng(seed)
    v = rng.integers(-n, n, size)
    v[: min(3, size)] = v[0]  # repeats
    return v


GATHER_CASES = [  # shape, chunks, index chunks
    ((40,), (7,), 5),
    ((40,), (40,), 64),
    ((25, 17), (4, 5), 3),
    ((25, 17), (25, 17), 100),
    ((25, 17), (6, 17), 11),
    ((5, 6, 7), (2, 4, 3), 4),
]


@pytest.mark.parametrize("shape,chunks,ichunks", GATHER_CASES)
def test_gathers_with_darray_and_host_indices(case, shape, chunks, ichunks, on_workers):
    a = values(shape, seed=2)
    x = dnp.from_numpy(a, chunks=chunks)
    got, want = [], []
    for axis in range(len(shape)):
        n = shape[axis]
        key = (slice(None),) * axis
        for size in (1, 7, 3 * n):
            v = indices(n, size, seed=size + axis)
            d = dnp.from_numpy(v, chunks=ichunks)
            with on_workers():
                got += [dnp.take(x, d, axis=axis), dnp.take(x, v, axis=axis), x[key + (d,)], x[key + (v,)]]
            want += [np.take(a, v, axis=axis)] * 2 + [a[key + (v,)]] * 2
    backwards = np.arange(shape[0])[::-1].copy()
    ordered = np.sort(np.abs(indices(shape[0], 2 * shape[0])) % shape[0])
    for v in (backwards, ordered):
        d = dnp.from_numpy(v, chunks=ichunks)
        with on_workers():
            got.append(x[d])
        want.append(a[v])
    for g, w in zip(got, want):
        same(g, w)


@pytest.mark.parametrize("key", [
    lambda i: (0, slice(None), i), lambda i: (i, slice(None), 0), lambda i: (slice(None), i, 0),
    lambda i: (0, i), lambda i: (None, i), lambda i: (i, None), lambda i: (slice(1, 4), i, slice(None, None, 2)),
    lambda i: (Ellipsis, i), lambda i: (i, Ellipsis, -1), lambda i: (1, None, i),
])
def test_index_arrays_in_keys_place_their_axis_as_numpy(case, key):
    a = values((4, 5, 6), seed=5)
    x = dnp.from_numpy(a, chunks=(3, 2, 4))
    v = np.array([3, -1, 0, 3])
    for idx in (v, dnp.from_numpy(v, chunks=3)):
        same(x[key(idx)], a[key(v)])


@SETTINGS
@given(data=st.data())
def test_gather_property(case, data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 8)) for _ in range(ndim))
    chunks = tuple(data.draw(st.integers(1, s)) for s in shape)
    axis = data.draw(st.integers(0, ndim - 1))
    n = shape[axis]
    v = np.asarray(data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=20)))
    a = values(shape, seed=data.draw(st.integers(0, 9)))
    x = dnp.from_numpy(a, chunks=chunks)
    d = dnp.from_numpy(v, chunks=data.draw(st.integers(1, len(v))))
    same(dnp.take(x, d, axis=axis), np.take(a, v, axis=axis))


def test_gather_errors(case):
    x = dnp.from_numpy(values((6, 4)), chunks=(4, 3))
    with pytest.raises(IndexError, match="out of bounds"):
        x[dnp.from_numpy(np.array([0, 6]))]
    with pytest.raises(IndexError, match="out of bounds"):
        x[dnp.from_numpy(np.array([-7, 0]), chunks=1)]
    with pytest.raises(IndexError, match="out of bounds"):
        dnp.take(x, np.array([4]), axis=1)
    with pytest.raises(IndexError, match="1-d integer"):
        dnp.take(x, dnp.from_numpy(np.array([0.5])), axis=0)
    with pytest.raises(IndexError, match="one axis"):
        x[np.array([0]), dnp.from_numpy(np.array([1]))]
    same(x[dnp.from_numpy(np.array([], np.int64))], np.zeros((0, 4)))
    same(dnp.take(x, np.array([], np.int64), axis=1), np.zeros((6, 0)))


# -- what must not happen ----------------------------------------------------------------
def test_index_arrays_never_pass_through_the_caller(case, on_workers):
    """Indices of 20,000 entries (160 kB, two chunks of 80 kB): no task's arguments and no
    result brought back grow with them (each under 16 kB), and a DArray of indices is never
    read here. The gathered rows are few columns wide in chunks of many rows (a result has
    the rows of x's chunks): the size under test is the indices', not the copies'."""
    a = values((400, 12), seed=6)
    x = dnp.from_numpy(a, chunks=(150, 6))
    v = indices(400, 20_000)
    d = dnp.from_numpy(v, chunks=10_000)
    with on_workers():
        got = [x[d], dnp.take(x, d, axis=0), dnp.take(x, v, axis=0), dnp.take(x, d[:250] % 12, axis=1)]
    for g, w in zip(got, [a[v], a[v], a[v], np.take(a, v[:250] % 12, axis=1)]):
        same(g, w)


def test_mask_positions_never_pass_through_the_caller(case, on_workers):
    """Masks selecting ~90,000 elements: their positions travel in no task's arguments
    and in no result brought back (each under 16 kB); a mask is never read here."""
    a = values((400, 250), seed=6)
    flat = a.reshape(-1)
    x = dnp.from_numpy(a, chunks=(100, 100))
    x1 = dnp.from_numpy(flat, chunks=7_000)
    m = dnp.from_numpy(a > 0.1, chunks=(100, 100))
    with on_workers():
        got = [x[x > 0.1], x[m], x[a > 0.1], x1[x1 < 0.9], x[m[:, 0]]]
        total = float(x[x > 0.5].sum())
    want = [a[a > 0.1], a[a > 0.1], a[a > 0.1], flat[flat < 0.9], a[a[:, 0] > 0.1]]
    for g, w in zip(got, want):
        same(g, w)
    np.testing.assert_allclose(total, a[a > 0.5].sum())


def test_sorts_across_blocks_carry_no_per_line_data(case, on_workers):
    """A sort along an axis cut into blocks, of 600 lines that each fit a chunk: no
    per-line split travels through the caller or a task (each under 16 kB)."""
    a = values((600, 90), seed=8)
    x = dnp.from_numpy(a, chunks=(100, 20))
    with on_workers():
        got = [dnp.sort(x, axis=1), dnp.argsort(x, axis=1, descending=True), dnp.sort(x, axis=0)]
    want = [np.sort(a, axis=1), np.flip(np.argsort(np.flip(a, axis=1), axis=1, kind="stable"), axis=1),
            np.sort(a, axis=0)]
    want[1] = a.shape[1] - 1 - want[1]
    for g, w in zip(got, want):
        same(g, w)
