"""Working memory: an operation's temporaries stay within the worker's budget
(``dgvm.working-memory``), working in slices of a chunk where they would grow with it;
running out is ``dgvm.OutOfDeviceMemory`` naming the operation, and the next operation
runs as usual.

The cpu tests run on a cluster of their own whose workers have a 1 MiB budget. The gpu
tests (``-m gpu``) fill a GPU close to full with dgvm's chunks and then draw random
numbers, run a fused chain and a reduction: each succeeds or raises OutOfDeviceMemory,
never CuPy's own error.
"""

from __future__ import annotations

import contextlib
import math

import dask.config
import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.array._engine import tree_op
from dgvm.array._engine.lifecycle import drain_releases
from dgvm.array._engine.tree_op import Elementwise, _part
from dgvm.array._engine.philox import WORK_PER_ELEMENT, Draw
from dgvm.backends import working_memory
from dgvm.backends.cuda import gpu_count

MiB = 2**20
BUDGET = 1 * MiB


# -- without a cluster ---------------------------------------------------------------------
@pytest.mark.parametrize("shape, per_element, limit", [
    ((1000,), 8, 800), ((7, 300), 8, 8 * 250), ((7, 300), 8, 8 * 1000), ((3, 4, 50), 16, 16 * 7),
    ((5, 6), 8, 1), ((5, 6), 8, 10**9), ((), 8, 1),
])
def test_slices_cover_the_block_once_in_c_order_each_within_the_limit(shape, per_element, limit):
    seen = np.zeros(shape, dtype=np.int64)
    order = []
    for lo, hi in working_memory.slices(shape, per_element, limit):
        n = math.prod(h - l for l, h in zip(lo, hi))
        assert n * per_element <= limit or n == 1
        seen[tuple(slice(l, h) for l, h in zip(lo, hi))] += 1
        order.append(np.ravel_multi_index(lo, shape) if shape else 0)
    assert (seen == 1).all()
    assert order == sorted(order)


@pytest.mark.parametrize("kind, dtype, params", [
    ("random", "<f8", ()), ("random", "<f4", ()), ("uniform", "<f8", (-2.0, 3.0)),
    ("normal", "<f8", (1.0, 2.0)), ("integers", "<i8", (-5, 2**40)), ("integers", "|u1", (0, 200)),
])
@pytest.mark.parametrize("limit", [1, 4096, 100_000, 10**9])
def test_a_draw_in_slices_gives_the_numbers_of_the_whole_chunk(kind, dtype, params, limit):
    shape, lo, hi = (40, 70), (3, 10), (29, 61)
    op = Draw(kind, (0x1234, 0xABCD), 2**32 + 3, shape, dtype, params)
    whole = op.values(lo, hi, np)
    sliced = np.empty_like(whole)
    assert op.block_into(None, lo, hi, np, sliced, limit=limit)
    np.testing.assert_array_equal(sliced.view(np.uint8), whole.view(np.uint8))


class _Budget:
    """A backend as ``working_memory.operation`` sees it: a budget, nothing to retry."""

    def __init__(self, nbytes):
        self.nbytes = nbytes

    def working_budget(self):
        return self.nbytes

    def retrying_allocations(self):
        return contextlib.nullcontext()


@pytest.mark.parametrize("budget, parts", [(10**9, 0), (64 * 900, 67), (64 * 100, 600)])
def test_a_tree_evaluated_node_by_node_runs_in_slices_of_the_budget(monkeypatch, budget, parts):
    rng = np.random.default_rng(7)
    x, y = rng.random((200, 300)), rng.random(300)
    f8 = "<f8"
    expr = ("call", "subtract", (("call", "multiply", (("call", "sin", (("in", 0),), f8), ("in", 1)), f8),
                                 ("in", 1)), f8)  # sin(x) * y - y, y broadcast
    op = Elementwise(expr, [x.shape, y.shape], x.shape)
    sliced = []
    monkeypatch.setattr(tree_op, "_part", lambda a, n, lo, hi: sliced.append(lo) or _part(a, n, lo, hi))
    out = np.empty_like(x)
    with working_memory.operation(_Budget(budget)):
        op.leaves_into([x, y], np, out)
    np.testing.assert_array_equal(out, np.sin(x) * y - y)
    # 4 temporaries of 16 bytes per element: 900 (3 rows) or 100 (a third of a row) a slice
    assert len(sliced) == 2 * parts  # each slice takes a part of both leaves


# -- a cpu cluster whose workers have a 1 MiB budget ---------------------------------------
@pytest.fixture(scope="module")
def small_budget():
    with dask.config.set({"dgvm.working-memory": BUDGET}):
        cluster = dgvm.LocalCluster(n_workers=2, backend="cpu", device_memory=[64 * MiB, 64 * MiB],
                                    processes=False, dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture
def cl(small_budget):
    """The small-budget cluster, left with no allocation after each test."""
    yield small_budget
    drain_releases()
    assert dgvm.table(client=small_budget) == []


def test_the_workers_read_their_budget(cl):
    budgets = cl.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.working_budget())
    assert set(budgets.values()) == {BUDGET}


@pytest.mark.parametrize("kind", ["random", "normal", "integers"])
def test_random_chunks_many_times_the_budget_are_drawn_in_slices_as_whole(cl, kind):
    shape, chunks = (300, 1000), (150, 1000)  # 150000 values a chunk: 20x the budget's worth
    assert 150_000 * WORK_PER_ELEMENT > 20 * BUDGET
    rng = dnp.random.default_rng(2026)
    x = {"random": lambda: rng.random(shape, chunks=chunks, client=cl),
         "normal": lambda: rng.normal(1.0, 3.0, shape, chunks=chunks, client=cl),
         "integers": lambda: rng.integers(-7, 10**12, shape, chunks=chunks, client=cl)}[kind]()
    params = {"random": (), "normal": (1.0, 3.0), "integers": (-7, 10**12 + 7)}[kind]
    op = Draw(kind, rng._key, 0, shape, x.dtype.str, params)
    want = op.values((0, 0), shape, np)  # the unsliced values, on the caller
    np.testing.assert_array_equal(x.to_numpy(), want)


def test_a_variance_of_chunks_past_the_budget_is_computed_in_rows(cl):
    host = np.random.default_rng(1).standard_normal((600, 500)) * 5 + 2
    x = dnp.from_numpy(host, chunks=(300, 500), client=cl)  # 1.1 MiB a chunk, deviations 3x
    np.testing.assert_allclose(float(dnp.var(x)), np.var(host), rtol=1e-12)
    np.testing.assert_allclose(dnp.var(x, axis=1).to_numpy(), np.var(host, axis=1), rtol=1e-12)
    np.testing.assert_allclose(dnp.std(x, axis=0).to_numpy(), np.std(host, axis=0), rtol=1e-12)


def test_a_broadcast_tree_past_the_budget_is_evaluated_in_slices(cl):
    rng = np.random.default_rng(6)
    hx, hy = rng.random((600, 500)), rng.random(500)
    x = dnp.from_numpy(hx, chunks=(300, 500), client=cl)
    y = dnp.from_numpy(hy, client=cl)
    # y broadcasts: evaluated node by node, 6 temporaries per element of a 1.1 MiB chunk
    np.testing.assert_allclose((dnp.sin(x) * y + x / 3.0 - y).to_numpy(),
                               np.sin(hx) * hy + hx / 3.0 - hy, rtol=1e-15)
    np.testing.assert_allclose(float(dnp.sum(dnp.cos(x) * y - x)), np.sum(np.cos(hx) * hy - hx), rtol=1e-12)
    np.testing.assert_allclose((x.T * y[:, None] + 1.0).to_numpy(), hx.T * hy[:, None] + 1.0, rtol=1e-15)


def test_a_sort_of_many_lines_is_sliced_into_lines(cl):
    host = np.random.default_rng(2).integers(0, 50, (400, 600))
    x = dnp.from_numpy(host, chunks=(400, 600), client=cl)  # lines of 600: 54 per MiB of work
    np.testing.assert_array_equal(dnp.argsort(x, axis=1).to_numpy(), np.argsort(host, axis=1, kind="stable"))
    np.testing.assert_array_equal(dnp.argsort(x, axis=0).to_numpy(), np.argsort(host, axis=0, kind="stable"))


def test_an_operation_past_the_budget_is_out_of_device_memory_and_the_next_one_runs(cl):
    host = np.random.default_rng(3).random(200_000)  # one line of 1.6 MB: its argsort needs 6.4 MB
    x = dnp.from_numpy(host, chunks=200_000, client=cl)
    with pytest.raises(dgvm.OutOfDeviceMemory) as err:
        dnp.argsort(x).wait()
    message = str(err.value)
    assert "argsort" in message and "LocalSort" in message
    assert "chunk 0" in message and "worker" in message and str(BUDGET) in message
    assert isinstance(err.value, MemoryError)
    # The input kept its values, and the cluster runs the next operations.
    np.testing.assert_array_equal(x.to_numpy(), host)
    small = dnp.from_numpy(host[:10_000], client=cl)
    np.testing.assert_array_equal(dnp.argsort(small).to_numpy(), np.argsort(host[:10_000], kind="stable"))
    np.testing.assert_allclose(float(dnp.sum(x * 2.0 + 1.0)), np.sum(host * 2.0 + 1.0))
    r = dnp.random.default_rng(5).random(200_000, client=cl)
    assert 0.49 < float(r.mean()) < 0.51


def test_a_failed_in_place_operation_leaves_the_output_as_it_was(cl):
    host = np.random.default_rng(4).random(200_000)
    x = dnp.from_numpy(host, chunks=200_000, client=cl)
    out = dnp.from_numpy(np.arange(200_000), chunks=200_000, client=cl)
    with pytest.raises(dgvm.OutOfDeviceMemory):
        out[...] = dnp.argsort(x)
        out.wait()
    np.testing.assert_array_equal(out.to_numpy(), np.arange(200_000))
    out[:10] = 7  # written again as usual
    np.testing.assert_array_equal(out.to_numpy()[:12], [7] * 10 + [10, 11])


def test_memory_errors_are_told_apart():
    assert working_memory.is_out_of_memory(MemoryError("x"))
    assert working_memory.is_out_of_memory(working_memory.WorkingMemoryExceeded("x"))
    assert working_memory.is_out_of_memory(RuntimeError("cudaErrorMemoryAllocation: out of memory"))
    assert working_memory.is_out_of_memory(RuntimeError("CUFFT_ALLOC_FAILED"))
    assert not working_memory.is_out_of_memory(ValueError("operands could not be broadcast"))


# -- cuda: a GPU close to full ---------------------------------------------------------------
@pytest.fixture(scope="module")
def full_gpu():
    if gpu_count() == 0:
        pytest.skip("no CUDA GPU visible")
    cluster = dgvm.LocalCluster(n_workers=1, backend="cuda", dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        (w,) = dgvm.workers(client=client)
        headroom = float(dask.config.get("dgvm.placement.headroom"))
        # Chunks fill what placement allows, less room for the results below (three arrays
        # of ``side``^2 float64): the temporaries have the headroom and no more.
        side = 8192  # 512 MiB a result
        room = w.free - int(headroom * w.capacity) - 3 * 8 * side * side - 64 * MiB
        fill = dnp.zeros(room // 8, dtype=np.float64, chunks=256 * MiB // 8, client=client)
        fill.wait()
        yield client, side, fill
        del fill
    finally:
        client.close()
        cluster.close()


def _succeeds_or_out_of_memory(fn):
    """``fn()``'s value, or None when it raised OutOfDeviceMemory (never CuPy's error)."""
    try:
        return fn()
    except dgvm.OutOfDeviceMemory:
        return None


@pytest.mark.gpu
def test_random_on_a_full_gpu_works_in_slices(full_gpu):
    client, side, _ = full_gpu
    rng = dnp.random.default_rng(11)
    x = _succeeds_or_out_of_memory(lambda: rng.normal(0.0, 1.0, (side, side), chunks=(side, side), client=client).persist())
    if x is not None:
        head = Draw("normal", rng._key, 0, (side, side), "<f8", (0.0, 1.0)).values((0, 0), (4, side), np)
        np.testing.assert_allclose(x[:4].to_numpy(), head, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_a_fused_chain_and_a_reduction_on_a_full_gpu(full_gpu):
    client, side, _ = full_gpu
    rng = dnp.random.default_rng(12)
    x = _succeeds_or_out_of_memory(lambda: rng.random((side, side), chunks=(side, side), client=client).persist())
    if x is None:
        return
    y = _succeeds_or_out_of_memory(lambda: (((2.0 * x + 1.0) * x - 3.0) / (x + 2.0)).persist())
    total = _succeeds_or_out_of_memory(lambda: float(dnp.var(x)))
    s = _succeeds_or_out_of_memory(lambda: float((x * x + x.T).sum()))
    host = x.to_numpy()
    if y is not None:
        np.testing.assert_allclose(y[:3].to_numpy(), (((2.0 * host + 1.0) * host - 3.0) / (host + 2.0))[:3])
    if total is not None:
        np.testing.assert_allclose(total, np.var(host), rtol=1e-9)
    if s is not None:
        np.testing.assert_allclose(s, (host * host + host.T).sum(), rtol=1e-9)
    # Then the device is usable: a small operation runs.
    np.testing.assert_allclose(float(dnp.sum(x[:10] * 2.0)), 2.0 * host[:10].sum())


@pytest.mark.gpu
def test_a_cupy_allocation_in_an_operation_gives_cached_chunk_buffers_back_and_tries_again():
    if gpu_count() == 0:
        pytest.skip("no CUDA GPU visible")
    import cupy

    from dgvm.backends.cuda import CACHE_FRACTION, CudaBackend

    b = CudaBackend(capacity=None)
    piece = 64 * MiB  # fine-grained: other processes may hold most of the GPU
    held = []
    try:
        while cupy.cuda.runtime.memGetInfo()[0] > 3 * piece:  # the GPU close to full of chunks
            held.append(b.allocate(piece, zero=False))
        for _ in range(min(len(held), int(CACHE_FRACTION * b.capacity) // piece - 1)):
            b.release(held.pop(), piece)  # kept by the backend for the next chunk
        assert b._cached >= 4 * piece
        want = cupy.cuda.runtime.memGetInfo()[0] + 2 * piece  # only with the kept buffers
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
            cupy.empty(want, dtype=cupy.uint8)  # CuPy's own pool alone cannot
        with working_memory.operation(b):
            a = cupy.empty(want, dtype=cupy.uint8)
        assert a.nbytes == want and b._cached == 0
        del a
    finally:
        cupy.get_default_memory_pool().free_all_blocks()
        for h in held:
            b.release(h, piece)
        b.close()
