"""Views alias their base, as NumPy's do: basic indexing, permutations and flips share
memory; writes through any view reach the base and every other view; overlapping
assignments give NumPy's result. Hypothesis draws the chunkings, the index expressions
and the sequences of writes and reads; every read is compared with NumPy element for
element."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dgvm
import dgvm.array as dnp
from numba import cuda

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def chunked(draw, max_dims=3, max_side=7):
    ndim = draw(st.integers(1, max_dims))
    shape = tuple(draw(st.integers(1, max_side)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, s)) for s in shape)
    return shape, chunks


def basic_key(draw, shape):
    """A basic index of an array of ``shape``: slices with any step, integers, None, ..."""
    key = []
    for n in shape:
        kind = draw(st.sampled_from(["slice", "slice", "int", "all"]))
        if kind == "int":
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "all":
            key.append(slice(None))
        else:
            step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
            start = draw(st.one_of(st.none(), st.integers(-n, n)))
            stop = draw(st.one_of(st.none(), st.integers(-n, n)))
            key.append(slice(start, stop, step))
    if draw(st.booleans()):
        key.insert(draw(st.integers(0, len(key))), None)
    if key and draw(st.booleans()):  # trailing full slices become an ellipsis
        while key and key[-1] == slice(None):
            key.pop()
        key.append(Ellipsis)
    return tuple(key)


def a_view(draw, x, h):
    """A view of ``x`` and the same view of its NumPy twin ``h``."""
    kind = draw(st.sampled_from(["key", "key", "T", "flip", "permute", "ravel"]))
    if kind == "ravel":  # a view where NumPy's is one, else a copy, as NumPy decides
        return x.reshape(-1), h.reshape(-1)
    if kind == "T":
        return (x.T, h.T) if x.ndim == 2 else (dnp.transpose(x), np.transpose(h))
    if kind == "flip":
        if x.ndim == 0:  # NumPy's flip has no axis 0 here, and neither has dgvm's
            with pytest.raises(np.exceptions.AxisError):
                np.flip(h, axis=0)
            with pytest.raises(np.exceptions.AxisError):
                dnp.flip(x, axis=0)
            return x[...], h[...]
        return dnp.flip(x, axis=0), np.flip(h, axis=0)
    if kind == "permute":
        order = tuple(draw(st.permutations(range(x.ndim))))
        return dnp.permute_dims(x, order), np.transpose(h, order)
    key = basic_key(draw, x.shape)
    return x[key], h[key]


def _dispatches(monkeypatch) -> list:
    """(name, homes) of each operation dispatched from now until ``monkeypatch.undo()``."""
    from dgvm.client import dispatch

    calls = []
    real = dispatch.submit

    def spy(client, fn, args, homes, deps, name, **kw):
        calls.append((name, homes))
        return real(client, fn, args, homes, deps, name, **kw)

    monkeypatch.setattr(dispatch, "submit", spy)
    return calls


def same(got, want):
    np.testing.assert_array_equal(dnp.asnumpy(got), np.asarray(want))


@SETTINGS
@given(data=chunked(), draw=st.data())
def test_writes_through_views_reach_the_base_and_every_other_view(case, data, draw):
    shape, chunks = data
    h = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    x = dnp.asarray(h, chunks=chunks)
    views = [(x, h)]
    scalars = []
    for step in range(draw.draw(st.integers(2, 6))):
        x_v, h_v = views[draw.draw(st.integers(0, len(views) - 1))]
        action = draw.draw(st.sampled_from(["view", "view", "scalar", "array", "iadd", "overlap", "read"]))
        if action == "view" and x_v.size:
            x_w, h_w = a_view(draw.draw, x_v, h_v)
            if isinstance(h_w, np.ndarray):
                views.append((x_w, h_w))
            else:  # an integer per axis: NumPy's scalar, a value that later writes leave alone
                scalars.append((x_w, h_w))
            continue
        if x_v.size == 0:
            continue
        if action == "scalar":
            key = basic_key(draw.draw, x_v.shape)
            x_v[key] = -step - 1.0
            h_v[key] = -step - 1.0
        elif action == "array":
            sub = np.shape(h_v[...])
            value = np.arange(np.prod(sub), dtype=np.float64).reshape(sub) * 10 + step
            if draw.draw(st.booleans()) and h_v.ndim:  # broadcast a last-axis row
                value = value[(0,) * (h_v.ndim - 1)]
            x_v[...] = value
            h_v[...] = value
        elif action == "iadd":
            x_v += 0.5
            h_v += 0.5
        elif action == "overlap":  # the value is another view of the same memory
            x_w, h_w = views[draw.draw(st.integers(0, len(views) - 1))]
            if np.shape(h_w) != np.shape(h_v) or h_w.size == 0:
                continue
            x_v[...] = x_w[::-1] if x_w.ndim else x_w
            h_v[...] = h_w[::-1].copy() if h_w.ndim else h_w.copy()
        for x_r, h_r in views:  # every view and the base agree with NumPy after each write
            same(x_r, h_r)
        for x_s, h_s in scalars:
            assert float(x_s) == float(h_s)
    same(x, h)


def test_the_issue_programs_see_their_writes(case):
    n = 12
    grid = dnp.zeros((n, n), chunks=(5, 5))
    center = grid[1:-1, 1:-1]
    work = dnp.asarray(np.arange((n - 2) ** 2, dtype=float).reshape(n - 2, n - 2), chunks=(4, 4))
    center[:] = work
    want = np.zeros((n, n))
    want[1:-1, 1:-1] = np.arange((n - 2) ** 2).reshape(n - 2, n - 2)
    same(grid, want)
    CALL = dnp.zeros((4, 6), chunks=(2, 3))
    out = CALL[2]
    out[...] = 3.0
    want = np.zeros((4, 6))
    want[2] = 3.0
    same(CALL, want)
    a = dnp.asarray(np.arange(10.0), chunks=3)
    v = a[2:6]
    a[3] = 5.0
    same(v, [2.0, 5.0, 4.0, 5.0])


def test_overlapping_assignments_give_numpys_result(case):
    h = np.arange(20.0)
    for key_to, key_from in [(np.s_[1:], np.s_[:-1]), (np.s_[:], np.s_[::-1]), (np.s_[:-3], np.s_[3:]),
                             (np.s_[::2], np.s_[1::2]), (np.s_[10:0:-1], np.s_[:10])]:
        x = dnp.asarray(h, chunks=(3,))
        x[key_to] = x[key_from]
        want = h.copy()
        want[key_to] = want[key_from]
        assert (want[key_to] == h[key_from]).all()  # NumPy's result: the values read before the write
        same(x, want)
    m = np.arange(36.0).reshape(6, 6)
    x = dnp.asarray(m, chunks=(4, 4))
    x[...] = x.T
    same(x, m.T)
    x = dnp.asarray(m, chunks=(4, 4))
    x[1:, :] += x[:-1, :]
    want = m.copy()
    want[1:, :] += want[:-1, :]
    same(x, want)


def test_views_of_views_compose_and_results_keep_their_values(case):
    h = np.arange(60.0).reshape(3, 4, 5)
    x = dnp.asarray(h, chunks=(2, 3, 2))
    v = dnp.permute_dims(x[::-1, 1:], (2, 0, 1))[1:4, None, :, ::2]
    hv = np.transpose(h[::-1, 1:], (2, 0, 1))[1:4, None, :, ::2]
    assert v.base is x and x.base is None
    y = v * 2  # a result: a new array with the values of now
    hy = hv * 2
    v[0, 0, 1, 0] = -1.0
    hv[0, 0, 1, 0] = -1.0
    same(x, h)
    same(y, hy)
    s = dnp.sort(v, axis=-1)  # an operation that needs stored chunks reads the view's values now
    same(s, np.sort(hv, axis=-1))
    x[...] = 0.0
    same(s, np.sort(hv, axis=-1))
    same(v, np.zeros(hv.shape))


def test_in_place_operators_and_out_through_views(case):
    h = np.arange(48.0).reshape(6, 8)
    x = dnp.asarray(h, chunks=(4, 3))
    col = x[:, 2]
    col *= 10
    h[:, 2] *= 10
    t = x.T[::2]
    t -= 1
    h.T[::2] -= 1
    d = x[1:3]
    d *= 2
    h[1:3] *= 2
    same(x, h)


@dgvm.kernel
def fill(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 7.0 + out[i]


def test_launch_into_a_view_writes_its_base(case):
    x = dnp.zeros(12, chunks=5)
    dgvm.launch(fill, out=x[2:9:3])
    want = np.zeros(12)
    want[2:9:3] = 7.0
    same(x, want)


def test_a_view_reads_only_the_chunks_it_covers_and_copies_nothing(case, monkeypatch):
    x = dnp.asarray(np.arange(100.0), chunks=10)
    before = case.allocations()
    v = x[20:35]
    assert case.allocations() == before  # making a view copies nothing
    assert float(v.sum()) == float(np.arange(20, 35).sum())
    from dgvm.array._engine.lifecycle import drain_releases

    drain_releases()
    assert case.allocations() == before  # a reduction of a view reads it in place
    calls = _dispatches(monkeypatch)
    v[...] = 1.0
    monkeypatch.undo()
    chunks = {k for idx in calls[0][1].values() for k in idx}
    assert chunks <= {2, 3}, chunks  # the write's tasks cover the view's chunks only
    want = np.arange(100.0)
    want[20:35] = 1.0
    same(x, want)


def test_writing_a_read_only_or_freed_view_raises(case):
    x = dnp.asarray(np.arange(6.0), chunks=4)
    v = x[1:4]
    v.free()  # a view's free gives back nothing of its base's
    same(x, np.arange(6.0))
    with pytest.raises(dgvm.DgvmError):
        dnp.asnumpy(v)


def test_reshape_and_ravel_are_views_where_numpys_are(case):
    h = np.arange(24.0).reshape(4, 6)
    x = dnp.asarray(h, chunks=(3, 4))
    r = x.reshape(2, 12)
    f = x.ravel()
    r[1, 3] = -5.0
    h.reshape(2, 12)[1, 3] = -5.0
    same(x, h)
    same(f, h.ravel())
    f[::5] = 100.0
    h.ravel()[::5] = 100.0
    same(x, h)
    same(r, h.reshape(2, 12))
    rows = x[1:3].reshape(-1)  # whole rows: contiguous, a view in NumPy too
    rows += 1
    h[1:3].reshape(-1)[...] += 1
    same(x, h)
    t = x.T.reshape(-1)  # NumPy copies here: writing it leaves x alone
    t[0] = 999.0
    same(x, h)
    with pytest.raises(ValueError):
        x.T.reshape(-1, copy=False)
    flat = x.flatten()  # always a copy
    flat[0] = -1.0
    same(x, h)


def test_real_imag_diagonal_and_broadcast_to_views(case):
    hz = (np.arange(12.0) + 1j * np.arange(12.0, 0, -1)).reshape(3, 4)
    z = dnp.asarray(hz, chunks=(2, 3))
    z.real[0] = 7.0
    hz.real[0] = 7.0
    z.imag[:, 1] += 0.5
    hz.imag[:, 1] += 0.5
    same(z, hz)
    hr = np.arange(9.0).reshape(3, 3)
    x = dnp.asarray(hr, chunks=(2, 2))
    d = dnp.diagonal(x)
    b = dnp.broadcast_to(x[0], (4, 3))
    x[1, 1] = -1.0
    x[0, 2] = -2.0
    hr[1, 1] = -1.0
    hr[0, 2] = -2.0
    same(d, np.diagonal(hr))
    same(b, np.broadcast_to(hr[0], (4, 3)))
    for ro in (d, b, x.imag, d[1:]):
        with pytest.raises(ValueError, match="read-only"):
            ro[...] = 0.0
    assert x.real is x


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2000,), (7, 8, 30), (2, 3, 4, 5, 6), (10000, 3), (0, 3)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.uint8, bool, np.complex128])
def test_print_shows_numpys_text(case, shape, dtype):
    rng = np.random.default_rng(sum(shape))
    h = rng.random(shape) > 0.5 if dtype is bool else (rng.standard_normal(shape) * 100).astype(dtype)
    x = dnp.asarray(h, chunks=tuple(max(1, s // 3) for s in shape))
    assert str(x) == str(h) and repr(x) == repr(h)
    assert f"{x}" == f"{h}"


def test_print_of_a_large_array_reads_only_the_elements_shown(case, monkeypatch):
    from dgvm.client.allocation import AllocationHandle

    x = dnp.asarray(np.arange(4000 * 500, dtype=np.float64).reshape(4000, 500), chunks=(500, 100))
    h = dnp.asnumpy(x)
    read = []
    real = AllocationHandle.get

    def spy(self, pieces):
        read.append(sum(p[2] for p in pieces))
        return real(self, pieces)

    monkeypatch.setattr(AllocationHandle, "get", spy)
    assert str(x) == str(h) and repr(x) == repr(h)
    assert sum(read) <= 2 * 36 * 8, read  # the 6 x 6 corner elements, for each of str and repr
    s = x.sum()
    assert str(s) == str(h.sum()) and f"{s:.3f}" == f"{h.sum():.3f}" and repr(s) == repr(np.asarray(h.sum()))
    with pytest.raises(TypeError):
        format(x, ".3f")


def test_an_expression_assigned_to_a_selection_is_computed_as_it_is_written(case, monkeypatch):
    h = np.arange(30 * 20, dtype=np.float64).reshape(30, 20)
    u = dnp.asarray(h, chunks=(10, 20))
    v = dnp.zeros_like(u)
    v.wait()
    calls = _dispatches(monkeypatch)
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    v.wait()
    monkeypatch.undo()
    assert len(calls) == 1, calls  # the expression is never stored: one operation
    want = np.zeros_like(h)
    want[1:-1, 1:-1] = 0.25 * (h[:-2, 1:-1] + h[2:, 1:-1] + h[1:-1, :-2] + h[1:-1, 2:])
    same(v, want)
    # Into a view, cast to the target's dtype, and broadcast.
    w = dnp.zeros((30, 20), dtype=np.int32, chunks=(7, 20))
    w.T[::2] = (u.T[::2] * 1.5 + 0.7)
    want_w = np.zeros((30, 20), np.int32)
    want_w.T[::2] = h.T[::2] * 1.5 + 0.7
    same(w, want_w)
    w[3:5] = u[0] - 2.5  # a row broadcast over the selection
    want_w[3:5] = h[0] - 2.5
    same(w, want_w)
    # A value that reads the target is computed whole before the write, as NumPy's is.
    x = dnp.asarray(h, chunks=(4, 20))
    x[1:-1] = x[:-2] + x[2:] * 2
    hx = h.copy()
    hx[1:-1] = hx[:-2] + hx[2:] * 2
    same(x, hx)
    x[::-1] = x * 0.5 + x[::-1]
    hx[::-1] = hx * 0.5 + hx[::-1]
    same(x, hx)
    # One element (every axis an integer) from an element, a reduction, a 0-d tree; a
    # 0-d array whole; a stored array of another chunking into a strided selection.
    y = dnp.asarray(h[0], chunks=7)
    x[3, 4] = y[5]
    x[4, 5] = y.sum()
    x[5, 6] = dnp.max(y) + 1
    hx[3, 4], hx[4, 5], hx[5, 6] = h[0, 5], h[0].sum(), h[0].max() + 1
    z = dnp.asarray(np.float64(2.5))
    z[...] = y.sum() * 2
    same(z, np.float64(h[0].sum() * 2))
    x[2:28:3, ::-2] = dnp.asarray(h[:9, :10] * -1, chunks=(4, 3))
    hx[2:28:3, ::-2] = h[:9, :10] * -1
    same(x, hx)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.integers(1, 7), min_size=1, max_size=6), start=st.integers(-50, 50),
       stop=st.integers(-50, 50), step=st.sampled_from([-7, -3, -2, -1, 1, 2, 3, 5, 11]),
       block=st.integers(0, 5))
def test_a_sliced_axis_is_cut_from_its_range_as_from_its_coordinates(chunks, start, stop, step, block):
    """A view's chunks, the chunks a slice writes (on the caller) and the positions it
    writes in a chunk (on its worker) are found by arithmetic per block, for every
    operation: a slice of a long axis is a range of millions of coordinates. The same as
    from the coordinates themselves."""
    from types import SimpleNamespace

    from dgvm.array._engine.assign_ops import Assign
    from dgvm.array._engine.keys import chunks_selected
    from dgvm.array._engine.placement import gathered_chunks

    x = SimpleNamespace(chunks=(tuple(chunks),), numblocks=(len(chunks),))
    r = range(sum(chunks))[start:stop:step]
    coords = np.asarray(r, dtype=np.int64)
    assert gathered_chunks(x, 0, r) == gathered_chunks(x, 0, coords)
    assert chunks_selected(x, [r]) == chunks_selected(x, [coords])
    b = min(block, len(chunks) - 1)
    lo, hi = [sum(chunks[:b])], [sum(chunks[:b + 1])]
    by_range, by_coords = (Assign((m,), (len(r),), (0,), 1.0, None).coords(None, lo, hi) for m in (r, coords))
    if by_coords is None:
        assert by_range is None
    else:
        for got, want in zip(by_range, by_coords):
            np.testing.assert_array_equal(got[0], want[0])


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data())
def test_a_chunks_positions_of_a_strided_slice_are_written_as_a_slice(shape, data):
    """The positions a key writes in a chunk, ranges of any step (negative ones through
    position 0 too) or runs of an index array, are written through a strided slice, the
    same elements as the index gather (``ix_``) of their coordinates."""
    from dgvm.array._engine.assign_ops import _array, _index

    coords = []
    for n in shape:
        r = range(n)[data.draw(st.integers(-n - 1, n + 1)):data.draw(st.integers(-n - 1, n + 1)):
                     data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))] or range(0, 1)
        coords.append(r if data.draw(st.booleans()) else np.asarray(r))
    by_index, by_gather = np.zeros(shape), np.zeros(shape)
    v = 1.0 + np.arange(np.prod([len(c) for c in coords])).reshape([len(c) for c in coords])
    by_index[_index(coords, np)] = v
    by_gather[np.ix_(*[np.asarray(_array(c)) for c in coords])] = v
    np.testing.assert_array_equal(by_index, by_gather)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_an_assignment_writes_each_chunk_as_numpy_writes_the_array(data):
    """``Assign`` on each chunk of a 2-d array (the positions a key of slices of any step
    and integers selects there, found as ranges, the value broadcast onto them and read
    by the region each chunk needs) writes what NumPy's ``x[key] = value`` writes."""
    from dgvm.array._engine.assign_ops import Assign

    shape = [data.draw(st.integers(1, 9)) for _ in range(2)]
    cuts = [sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=3))) if n > 1 else [] for n in shape]
    key, maps, keep = [], [], []
    for a, n in enumerate(shape):
        if data.draw(st.booleans()) or n == 1:
            r = range(n)[data.draw(st.integers(-n, n)):data.draw(st.integers(-n, n)):
                         data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))] or range(0, 1)
            key.append(slice(r.start, None if r.stop < 0 else r.stop, r.step))
            maps.append(r)
            keep.append(a)
        else:
            i = data.draw(st.integers(0, n - 1))
            key.append(i)
            maps.append(np.asarray([i]))
    sel_shape = tuple(len(maps[a]) for a in keep)
    vshape = tuple(1 if data.draw(st.booleans()) else n for n in sel_shape)[data.draw(st.integers(0, len(sel_shape))):]
    value = 1.0 + np.arange(int(np.prod(vshape))).reshape(vshape)
    want = np.zeros(shape)
    want[tuple(key)] = value
    got = np.zeros(shape)
    op = Assign(tuple(maps), sel_shape, tuple(keep), None, vshape)
    edges = [[0, *c, n] for c, n in zip(cuts, shape)]
    for (r0, r1) in zip(edges[0][:-1], edges[0][1:]):
        for (c0, c1) in zip(edges[1][:-1], edges[1][1:]):
            def read(i, lo, hi, r0=r0, c0=c0):
                src = got if i == 0 else value
                return src[tuple(slice(l, h) for l, h in zip(lo, hi))]
            op.block_into(read, [r0, c0], [r1, c1], np, got[r0:r1, c0:c1])
    np.testing.assert_array_equal(got, want)
