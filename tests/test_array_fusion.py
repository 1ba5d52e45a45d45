"""Deferred elementwise results and their fused evaluation (dgvm.array._engine.deferred, .fused):
a chain is one allocation and one pass, its values are NumPy's, and a write, a free or an
error anywhere keeps the eager semantics a NumPy program expects."""

from __future__ import annotations

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.array._engine import deferred, fused


def chain(x):
    return ((2.0 * x + 1.0) * x - 3.0) / (x + 2.0)


def test_a_chain_is_one_allocation_with_numpys_values(case):
    h = np.random.default_rng(0).random((300, 400))
    x = dnp.asarray(h, chunks=(100, 400))  # 40000-element chunks: cpu runs them in tiles
    before = case.allocations()
    y = chain(x)
    assert y.describe().endswith("deferred>") and case.allocations() == before
    np.testing.assert_allclose(dnp.asnumpy(y), chain(h), rtol=1e-10)
    assert case.allocations() == before + 1  # the result only: no intermediates
    assert y.locations() == x.locations()  # colocated with its leaf


def test_mixed_dtypes_where_clip_astype_and_broadcasting_fused(case):
    rng = np.random.default_rng(1)
    hi = rng.integers(-50, 50, (200, 300), dtype=np.int8)
    hf = rng.random((200, 300)).astype(np.float32)
    hrow = rng.random(300)
    i8, f32, row = dnp.asarray(hi, chunks=(60, 300)), dnp.asarray(hf, chunks=(60, 300)), dnp.asarray(hrow)
    got = dnp.where(i8 > 0, dnp.clip(f32 * i8, -3, 3), dnp.astype(i8, "float32") - 1) + 2
    want = np.where(hi > 0, np.clip(hf * hi, -3, 3), hi.astype(np.float32) - 1) + 2
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(dnp.asnumpy(got), want, rtol=1e-6)
    # A broadcast leaf (a row) in the tree, and integer wrap-around in int8.
    b = dnp.sqrt(f32 * row) - row
    np.testing.assert_allclose(dnp.asnumpy(b), np.sqrt(hf * hrow) - hrow, rtol=1e-6)
    w = i8 * 3 + 100
    np.testing.assert_array_equal(dnp.asnumpy(w), hi * np.int8(3) + np.int8(100))


def test_writes_and_frees_see_values_as_of_the_operation(case):
    h = np.arange(120_000, dtype=np.float64)
    x = dnp.asarray(h, chunks=40_000)
    y = x + 1
    x[:10] = -5.0  # the write materializes y first, from x as it was
    assert not y.describe().endswith("deferred>")
    np.testing.assert_array_equal(dnp.asnumpy(y), h + 1)
    z = x * 2
    x += 1  # in place on a real array: z is computed before
    np.testing.assert_array_equal(dnp.asnumpy(z)[:12], np.r_[[-10.0] * 10, 20.0, 22.0])
    u = x - 1
    x.free()  # u was made from x: computed before x's memory goes
    np.testing.assert_array_equal(dnp.asnumpy(u)[:12], np.r_[[-5.0] * 10, 10.0, 11.0])


def test_a_launch_into_an_input_runs_deferred_readers_first(case):
    from test_examples import load

    saxpy = load("saxpy").saxpy
    h = np.ones(50_000, dtype=np.float32)
    x, y = dnp.asarray(h, chunks=10_000), dnp.asarray(h, chunks=10_000)
    before = y * 10
    dgvm.launch(saxpy, np.float32(2.0), x, y, out=y)  # y := 2x + y = 3
    np.testing.assert_array_equal(dnp.asnumpy(before), 10 * h)
    np.testing.assert_array_equal(dnp.asnumpy(y), 3 * h)


def test_in_place_on_a_deferred_array_grows_its_tree(case):
    h = np.linspace(0, 1, 60_000)
    x = dnp.asarray(h, chunks=20_000)
    before = case.allocations()
    w = x * 2
    w += 1
    w *= 3
    assert w.describe().endswith("deferred>") and case.allocations() == before
    np.testing.assert_allclose(dnp.asnumpy(w), (h * 2 + 1) * 3)


def test_long_loops_stay_bounded(case):
    h = np.zeros(30_000)
    x = dnp.asarray(h, chunks=10_000)
    v = x
    sizes = []
    for _ in range(100):
        v = v + 1
        if v.deferred is not None:
            sizes.append(v.deferred.nodes)
    assert max(sizes) <= deferred.MAX_NODES + 2
    np.testing.assert_array_equal(dnp.asnumpy(v), h + 100)


def test_a_deferred_result_computed_once_is_stored_when_read_again(case):
    """A deferred result whose values a reduction computed without storing them (its own
    tree reduced, or a tree it was inlined into: ``r`` in ``r @ r``) is stored at its next
    reader, so no later tree computes it again, nor holds its inputs. A temporary read
    several times while a formula is built still fuses into one tree, and one inlined
    into a tree that is stored (not reduced) stays deferred."""
    h = np.linspace(-1, 1, 40_000)
    x = dnp.asarray(h, chunks=10_000)
    t = x * 0.5 + 1
    poly = t * (0.25 + t * (-0.5 + t * 1.5))  # t read three times, nothing computed
    assert t.deferred is not None and poly.deferred.inputs == [x]
    ht = h * 0.5 + 1
    np.testing.assert_allclose(dnp.asnumpy(poly), ht * (0.25 + ht * (-0.5 + ht * 1.5)))
    u = t * 2  # poly was stored, not reduced: t is still inlined
    assert t.deferred is not None and u.deferred.inputs == [x]
    before = case.allocations()
    r = x * 2 + 1
    np.testing.assert_allclose(float(r @ r), ((h * 2 + 1) ** 2).sum())
    assert r.deferred is not None and case.allocations() == before  # reduced where its leaves live
    p = r + 0.5 * x  # r's values were computed by the reduction: stored now, read as a leaf
    assert r.is_stored and p.deferred.inputs == [r, x]
    np.testing.assert_allclose(dnp.asnumpy(p), h * 2.5 + 1)
    np.testing.assert_allclose(dnp.asnumpy(u), 2 * ht)


def test_errors_surface_when_computed_and_leave_nothing(case):
    x = dnp.ones(10_000, chunks=2_500)
    y = x + 1
    y.free()  # never computed: nothing to give back
    with pytest.raises(dgvm.DgvmError, match="freed before it was computed"):
        y.wait()
    with pytest.raises(ValueError, match="do not broadcast"):
        x + dnp.ones(3)  # shapes and dtypes are still checked at once
    with pytest.raises(TypeError):
        x + "a"


def test_cuda_chains_run_as_one_fused_kernel(case):
    if case.backend != "cuda":
        pytest.skip("the fused CUDA kernel is a cuda-backend matter")
    h = np.random.default_rng(2).random((512, 1024))
    x = dnp.asarray(h, chunks=(128, 1024))
    y = chain(x)
    np.testing.assert_allclose(dnp.asnumpy(y), chain(h), rtol=1e-10)
    # On the workers of x's chunks (placement may leave a worker of 3 or more without one).
    ways = case.client.run(fused.ways_used, workers=sorted(set(x.alloc.homes())))
    assert all("wide" in w.values() for w in ways.values()), ways  # a float tree: four per thread
    # float32 (Python scalars enter as float32), an odd size (the last block partly
    # empty), in place into one of its own leaves, math functions, and a tree the wide
    # kernel does not cover (an integer power) beside it.
    h32 = np.random.default_rng(3).random(100_003).astype(np.float32)
    x32 = dnp.asarray(h32, chunks=25_001)
    z = dnp.sqrt(x32 * 3 + 1) - dnp.exp(-x32) / 2
    assert z.dtype == np.float32
    np.testing.assert_allclose(dnp.asnumpy(z), np.sqrt(h32 * 3 + 1) - np.exp(-h32) / 2, rtol=1e-6)
    x32 += x32 * 0.5
    np.testing.assert_allclose(dnp.asnumpy(x32), h32 + h32 * np.float32(0.5), rtol=1e-6)
    k = dnp.asarray(np.arange(10_000, dtype=np.int64), chunks=5_000)  # past small_reads' size
    assert np.array_equal(dnp.asnumpy(k ** 2 + 1), np.arange(10_000) ** 2 + 1)
    ways = [v for w in case.client.run(fused.ways_used).values() for v in w.values()]
    assert "wide" in ways and "in place" in ways, ways


def test_complex_special_value_corrections_fuse_on_cuda(case):
    """The standard's complex expm1 and tanh (dgvm.array._engine.special_values) are traced into
    the fused kernel like any other tree, not left to the op-by-op fallback."""
    if case.backend != "cuda":
        pytest.skip("the fused CUDA kernel is a cuda-backend matter")
    rng = np.random.default_rng(5)
    h = rng.random(10_000) - 0.5 + 1j * (rng.random(10_000) - 0.5)  # past small_reads' size
    h[:4] = [complex(np.inf, 0), complex(-np.inf, 2), complex(np.inf, np.nan), complex(-0.0, 0)]
    x = dnp.asarray(h, chunks=5_000)
    with np.errstate(all="ignore"):
        got_e, got_t = dnp.asnumpy(dnp.expm1(-(-x))), dnp.asnumpy(dnp.tanh(-(-x)))
        np.testing.assert_allclose(got_e[4:], np.expm1(h[4:]), rtol=1e-9)
        np.testing.assert_allclose(got_t[4:], np.tanh(h[4:]), rtol=1e-9)
    assert got_e[0] == complex(np.inf, 0) and got_e[1] == -1 and got_e[3] == 0 and not np.signbit(got_e[3].real)
    ways = {key: way for w in case.client.run(fused.ways_used).values() for key, way in w.items()
            if "'expm1'" in repr(key[0]) or "'tanh'" in repr(key[0])}
    assert ways and not any(way.startswith("unfused") for way in ways.values()), ways


def test_the_wide_kernel_covers_float_trees_of_exact_operations_only():
    from dgvm.array._engine import wide_kernel

    x, s = ("in", 0), ("arg", 0, "float")
    f8, f4, i8 = "<f8", "<f4", "<i8"
    code = wide_kernel.source(("call", "divide", (("call", "add", (x, s), f8), x), f8), [f8], f8, 1)
    assert "double v0[4]" in code and "s0" in code and code.count("in0[") == 1  # loaded once
    mixed = ("call", "add", (("call", "astype", (x,), f8), ("in", 1)), f8)
    assert "float v0[4]" in wide_kernel.source(mixed, [f4, f8], f8, 0)
    for tree, leaves, out in [
        (("call", "add", (x, x), i8), [i8], i8),  # integers: NumPy's wrap-around rules
        (("call", "maximum", (x, x), f8), [f8], f8),  # NaN rules C's fmax does not share
        (("call", "add", (x, x), "<c16"), ["<c16"], "<c16"),
        (("call", "greater", (x, s), "|b1"), [f8], "|b1"),
        (("in", 0), [f8], f8),  # a leaf alone is a copy, not a kernel
    ]:
        assert wide_kernel.source(tree, leaves, out, 1) is None, tree


def test_a_reduction_of_a_deferred_array_allocates_nothing(case):
    h = np.random.default_rng(3).random((400, 400))
    x = dnp.asarray(h, chunks=(100, 100))
    xt = x.T
    before = case.allocations()
    y = x + xt
    np.testing.assert_allclose(float(y.sum()), (h + h.T).sum(), rtol=1e-10)
    np.testing.assert_allclose(dnp.asnumpy(((x - 0.5) ** 2).mean(axis=0)), ((h - 0.5) ** 2).mean(axis=0), rtol=1e-10)
    assert y.describe().endswith("deferred>")  # reduced where its leaves live, never stored
    from dgvm.array._engine.lifecycle import drain_releases

    drain_releases()  # the small results were temporaries
    assert case.allocations() == before  # and y was never stored
    # Its second reader finds it stored: its tree runs once more, not once per reader.
    assert int(dnp.argmax(y * -1)) == int(np.argmax(-(h + h.T)))
    assert y.is_stored
    np.testing.assert_allclose(dnp.asnumpy(y), h + h.T)


def test_reductions_of_trees_over_axes_and_dtypes(case):
    # On cuda each of these is one kernel per chunk that ends with the reduction.
    rng = np.random.default_rng(5)
    h = rng.random((240, 180))
    h32 = h.astype(np.float32)
    hi = rng.integers(-100, 100, (240, 180), dtype=np.int8)
    x, x32 = dnp.asarray(h, chunks=(60, 90)), dnp.asarray(h32, chunks=(60, 90))
    i8 = dnp.asarray(hi, chunks=(60, 90))
    np.testing.assert_allclose(float((x * x - 1).sum()), (h * h - 1).sum(), rtol=1e-12)
    np.testing.assert_allclose(dnp.asnumpy((x * 2).sum(axis=0)), (h * 2).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(dnp.asnumpy((x + 1).prod(axis=1)), (h + 1).prod(axis=1), rtol=1e-10)
    np.testing.assert_allclose(dnp.asnumpy((x - 0.5).max(axis=1)), (h - 0.5).max(axis=1))
    assert float((x * -1).min()) == (h * -1).min()
    got = (x32 * 3).sum()
    assert got.dtype == np.float32
    np.testing.assert_allclose(float(got), (h32 * 3).sum(dtype=np.float32), rtol=1e-5)
    got = (i8 * 2).sum(axis=1)  # int8 wraps in the tree, the sum is int64
    assert got.dtype == np.int64
    np.testing.assert_array_equal(dnp.asnumpy(got), (hi * np.int8(2)).sum(axis=1))
    np.testing.assert_array_equal(dnp.asnumpy((i8 > 0).sum(axis=0)), (hi > 0).sum(axis=0))
    # Long chunks, reduced by rows on cuda, with elements left over past the last row.
    hz = rng.random(2 * 9001) + 0.5
    z = dnp.asarray(hz, chunks=9001)
    np.testing.assert_allclose(float((z * 2 + 1).sum()), (hz * 2 + 1).sum(), rtol=1e-12)
    assert float((z - 3).max()) == (hz - 3).max() and float((z + 1).min()) == (hz + 1).min()
    np.testing.assert_allclose(float((z * 0 + 1.00001).prod()), (hz * 0 + 1.00001).prod(), rtol=1e-10)
    one = dnp.asarray(np.array([2.0]))  # a leaf of one element, broadcast over each row
    np.testing.assert_allclose(float((z * one).sum()), (hz * 2.0).sum(), rtol=1e-12)
    if case.backend == "cuda":  # the whole-array sums, products, max and min of contiguous trees
        ways = case.client.run(fused.ways_used)
        reduced = {(k[1], v) for w in ways.values() for k, v in w.items() if k[0] == "reduce"}
        assert reduced == {(fn, "fused reduction") for fn in ("sum", "min", "max", "prod")}, ways


def misses(case) -> int:
    return sum(w["misses"] for w in dgvm.stats(client=case.client)["workers"].values())


def test_a_transpose_is_read_in_place_and_its_replicas_reused(case):
    case.needs_workers(2, "blocks of other workers to fetch")
    h = np.random.default_rng(4).random((360, 360))
    # A 6x6 grid placed round robin: with 2 or 3 workers, blocks (i, j) and (j, i) are on
    # different workers for many pairs (their chunk indices differ by 5 (i - j)).
    x = dnp.from_numpy(h, chunks=60, placement="round_robin")
    before = case.allocations()
    t = x.T
    assert t.base is x and t.shape == (360, 360)
    first = misses(case)
    np.testing.assert_allclose(float((x + x.T).sum()), (h + h.T).sum(), rtol=1e-10)
    fetched = misses(case) - first
    assert fetched > 0  # blocks (j, i) of other workers came over, once
    np.testing.assert_allclose(float((x * x.T).sum()), (h * h.T).sum(), rtol=1e-10)
    assert misses(case) - first == fetched  # the second use reads the same replicas
    assert case.allocations() == before
    np.testing.assert_array_equal(dnp.asnumpy(t), h.T)  # computed when asked for
    x[0, 1] = -1.0  # a write: replicas dropped; t was computed before
    np.testing.assert_allclose(float((x - x.T)[1, 0]), 1.0 + h[1, 0])
    h3 = np.random.default_rng(5).random((4, 6, 8))
    a = dnp.asarray(h3, chunks=(2, 3, 4))
    got = dnp.permute_dims(a, (2, 0, 1)) * 2 + dnp.moveaxis(a, 2, 0)
    np.testing.assert_allclose(dnp.asnumpy(got), np.transpose(h3, (2, 0, 1)) * 2 + np.moveaxis(h3, 2, 0))


def test_basic_indexing_makes_views_read_in_place(case):
    h = np.random.default_rng(6).random((40, 30, 6))
    x = dnp.asarray(h, chunks=(12, 8, 4))
    before = case.allocations()
    keys = [np.s_[::3], np.s_[1:-1, ::-2], np.s_[3], np.s_[..., 2], np.s_[None, 2:5, None, ::4, -1],
            np.s_[-3, -4, 5], np.s_[:], np.s_[::-1, 3:, None]]
    views = [x[k] for k in keys]
    assert all(v.base is x for v in views if v.ndim) and case.allocations() == before
    nested = dnp.permute_dims(x[::2][1:, ::-1], (2, 0, 1))[::3, None, 1]
    assert len(nested.deferred.inputs) == 1  # a view of views: one view of x
    # A stencil reads x's chunks through four views in one pass; a reduction stores nothing.
    s = x[:-2, 1:-1] + x[2:, 1:-1] - 2 * x[1:-1, 1:-1]
    np.testing.assert_allclose(float(x[::3, ::-2].sum()), h[::3, ::-2].sum(), rtol=1e-10)
    from dgvm.array._engine.lifecycle import drain_releases

    drain_releases()  # the sum's small result was a temporary
    assert case.allocations() == before
    np.testing.assert_allclose(dnp.asnumpy(s), h[:-2, 1:-1] + h[2:, 1:-1] - 2 * h[1:-1, 1:-1], rtol=1e-12)
    for k, v in zip(keys, views):
        np.testing.assert_array_equal(dnp.asnumpy(v), h[k])
    np.testing.assert_array_equal(
        dnp.asnumpy(nested), np.transpose(h[::2][1:, ::-1], (2, 0, 1))[::3, None, 1])
    # A view shows its base's memory: a write to either is seen through both.
    row = x[2]
    x[2, 3] = -1.0  # views share their base's memory, as in NumPy
    h[2, 3] = -1.0
    np.testing.assert_array_equal(dnp.asnumpy(row), h[2])
    row[0, 0] = 7.0
    assert float(x[2, 0, 0]) == 7.0 and float(row[0, 0]) == 7.0
    assert x[5:5].shape == (0,) + x.shape[1:] and dnp.asnumpy(x[5:5]).shape == h[5:5].shape


def test_in_place_operations_reading_the_array_through_a_view(case):
    n = np.arange(64.0).reshape(8, 8)
    v = np.arange(40.0)
    cases = [
        (n, lambda x: x.__iadd__(x.T), lambda h: h + h.T),
        (v, lambda x: x.__iadd__(x[::-1]), lambda h: h + h[::-1]),
        (v, lambda x: x.__isub__(x[3]), lambda h: h - h[3]),
        (n, lambda x: x.__isub__(x[:, :1]), lambda h: h - h[:, :1]),
        (n, lambda x: x.__imul__(x[::-1, ::-1] + 1), lambda h: h * (h[::-1, ::-1] + 1)),
    ]
    for h, op, want in cases:
        x = dnp.from_numpy(h, chunks=(2,) * h.ndim)
        op(x)
        np.testing.assert_array_equal(dnp.asnumpy(x), want(h.copy()))
    x = dnp.from_numpy(v, chunks=(4,))
    x[::-1] = x  # the value is the array being written
    np.testing.assert_array_equal(dnp.asnumpy(x), v[::-1])


def test_a_failed_computation_leaves_the_result_deferred_and_nothing_allocated(case, monkeypatch):
    from dgvm.array._engine import blockwise

    a = dnp.from_numpy(np.arange(40.0), chunks=(4,))
    z = a + a * 2
    before = case.allocations()

    def broken(*args, **kwargs):
        raise RuntimeError("dispatch failed")

    with monkeypatch.context() as m:
        m.setattr(blockwise, "run", broken)
        with pytest.raises(RuntimeError, match="dispatch failed"):
            z.wait()
    assert z.describe().endswith("deferred>") and case.allocations() == before
    np.testing.assert_array_equal(dnp.asnumpy(z), 3 * np.arange(40.0))  # and it still works
    y = a + 1
    y.free()
    with pytest.raises(dgvm.DgvmError, match="freed before it was computed"):
        a + y * 2  # refused where it is written
    b = dnp.from_numpy(np.arange(8.0))
    b.free()
    with pytest.raises(dgvm.DgvmError, match="was freed"):
        b[::2]


def test_reductions_of_views_store_nothing_and_readers_do_not_pile_up(case):
    h = np.random.default_rng(7).random((60, 50))
    x = dnp.from_numpy(h, chunks=(20, 20))
    before = case.allocations()
    np.testing.assert_allclose(float(x[::3].sum()), h[::3].sum(), rtol=1e-10)
    np.testing.assert_allclose(dnp.asnumpy((x[1:] - x[:-1]).max(axis=0)), (h[1:] - h[:-1]).max(axis=0))
    for i in range(30):
        float((x * i).sum())
    import gc

    gc.collect()
    assert len(x.readers()) <= 1  # entries go with the deferred results that read x
    from dgvm.array._engine.lifecycle import drain_releases

    drain_releases()
    assert case.allocations() == before
