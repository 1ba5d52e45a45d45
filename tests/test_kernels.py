"""Kernels where the data lives, misses, replicas and invalidation; one body, two backends."""

import dask
import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as dnp

from test_examples import load

heat = load("heat_stencil")  # the example's kernel, tested here on misaligned blocks too


@dgvm.kernel
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@dgvm.kernel
def fails(x, out):
    i = cuda.grid(1)
    if i < out.size:
        if x[i] == 3:
            raise ValueError("element 3 is bad")
        out[i] = x[i]


@dgvm.vectorize(["float32(float32, float32)", "float64(float64, float64)"])
def hypot2(a, b):
    return a * a + b * b


def spread_and_gather(size, chunks):
    """x = arange(size) spread over the workers; out, zeros, all on one worker (so that a
    launch writing out reads x's chunks homed elsewhere remotely)."""
    x = dnp.from_numpy(np.arange(float(size)), chunks=chunks, placement="round_robin")
    out = dnp.zeros(size, chunks=chunks, placement="packed")
    return x, out


def free(*arrays):
    for a in arrays:
        a.free()


def test_axpy_aligned_and_misaligned(case):
    case.needs_workers(2, "chunks on other workers")
    xn, yn = np.arange(10_000.0), np.linspace(0, 1, 10_000)
    x = dnp.from_numpy(xn, chunks=1000)
    y = dnp.from_numpy(yn, chunks=1000, placement="round_robin")  # other homes: misses
    out = dnp.empty(10_000, chunks=1000, colocate=x)
    try:
        dgvm.launch(axpy, 2.0, x, y, out=out)
        dgvm.launch(axpy, -1.0, out, y, out=out)  # ordered after the first launch
        assert np.allclose(dnp.asnumpy(out), -(2 * xn + yn) + yn)
        s = dgvm.stats()["allocations"]
        assert s[x.alloc_id]["misses"] == 0 and s[y.alloc_id]["misses"] > 0
    finally:
        free(x, y, out)


def test_hits_and_misses_are_exact(case):
    n = len(case.capacities)
    x = dnp.from_numpy(np.arange(8.0 * n), chunks=8, placement="round_robin")
    y = dnp.from_numpy(np.ones(8 * n), chunks=8, placement="round_robin")
    out = dnp.zeros(8 * n, chunks=8, placement="packed")  # every chunk on one worker
    try:
        owner = out.alloc.home(0)
        remote = sum(x.alloc.home(k) != owner for k in range(n))
        with dask.config.set({"dgvm.migration.rehome-after": 0}):  # no re-homing here
            for _ in range(3):
                dgvm.launch(axpy, 1.0, x, y, out=out)
            dgvm.wait(out)
        s = dgvm.stats()["allocations"][x.alloc_id]
        # first launch: a miss per remote chunk; later launches: all hits (replicas)
        assert (s["misses"], s["hits"]) == (remote, 3 * n - remote)
        assert s["replicas"] == remote
        assert np.allclose(dnp.asnumpy(out), np.arange(8.0 * n) + 1)
    finally:
        free(x, y, out)


def test_write_bumps_version_and_drops_replicas(case):
    case.needs_workers(2, "replicas on another worker")
    x, out = spread_and_gather(16, 4)
    try:
        dgvm.launch(axpy, 1.0, x, x, out=out)
        dgvm.wait(out)
        before = {c.index: c.version for c in dgvm.table(alloc_id=x.alloc_id, chunks=True)[0].chunks}
        assert dgvm.stats()["allocations"][x.alloc_id]["replicas"] > 0
        x.write_blocks(np.full(16, 10.0))  # writes at the homes
        info = dgvm.table(alloc_id=x.alloc_id, chunks=True)[0]
        assert all(c.version == before[c.index] + 1 for c in info.chunks)
        assert dgvm.stats()["allocations"][x.alloc_id]["replicas"] == 0
        dgvm.launch(axpy, 1.0, x, x, out=out)  # must not read a stale replica
        assert np.allclose(dnp.asnumpy(out), 20.0)
    finally:
        free(x, out)


def test_comm_path_when_same_host_paths_are_off(case):
    case.needs_workers(2, "a transfer between workers")
    with dask.config.set({"dgvm.transfer.same-host": False}):
        x, out = spread_and_gather(64, 16)
        try:
            dgvm.launch(axpy, 3.0, x, x, out=out)
            assert np.allclose(dnp.asnumpy(out), 4 * np.arange(64.0))
            paths = dgvm.stats()["allocations"][x.alloc_id]["paths"]
            assert set(paths) == {"comm"} and paths["comm"]["bytes"] > 0
        finally:
            free(x, out)


def test_same_host_path_is_used(case):
    case.needs_workers(2, "a transfer between workers")
    x, out = spread_and_gather(64, 16)
    try:
        dgvm.launch(axpy, 1.0, x, x, out=out)
        dgvm.wait(out)
        paths = dgvm.stats()["allocations"][x.alloc_id]["paths"]
        assert set(paths) == {"cuda_ipc" if case.backend == "cuda" else "shm"}
    finally:
        free(x, out)


def test_heat_stencil_with_halo(case):
    rng = np.random.default_rng(0)
    un = rng.random((60, 45))
    u = dnp.from_numpy(un, chunks=(16, 20), placement="round_robin")
    v = dnp.zeros((60, 45), chunks=(16, 20))
    try:
        ref = un
        for step in range(4):
            src, dst = (u, v) if step % 2 == 0 else (v, u)
            dgvm.launch(heat.heat_step, src, out=dst, halo=1, pass_origin=True)
            ref = heat.numpy_step(ref)
        assert np.allclose(dnp.asnumpy(u), ref)
    finally:
        free(u, v)


def test_vectorize_colocated_with_first_input(case):
    for dtype in ("float32", "float64"):
        a = np.linspace(0, 3, 500, dtype=dtype)
        x = dnp.from_numpy(a, chunks=100)
        y = dnp.from_numpy(a[::-1].copy(), chunks=100, placement="round_robin")
        z = hypot2(x, y)
        try:
            assert z.dtype == np.dtype(dtype) and z.locations() == x.locations()
            assert np.allclose(dnp.asnumpy(z), a * a + a[::-1] ** 2)
            w = hypot2(x, 2.0)  # scalars broadcast
            assert np.allclose(dnp.asnumpy(w), a * a + 4)
            w.free()
        finally:
            free(x, y, z)


def test_kernel_error_keeps_previous_contents(case):
    if case.backend == "cuda":
        pytest.skip("GPU kernels raise only when compiled with debug=True")
    # one worker holds both chunks: its task stops at the failing chunk 0
    x = dnp.from_numpy(np.arange(10, dtype=np.int64), chunks=5, placement="packed")
    out = dnp.from_numpy(np.full(10, 7, dtype=np.int64), chunks=5, colocate=x)
    try:
        dgvm.launch(fails, x, out=out)
        with pytest.raises(dgvm.KernelError, match="fails.*chunk 0.*worker"):
            out.wait()
        out.pending.writes = []  # forget the failed launch, read what the chunks hold
        assert (dnp.asnumpy(out) == 7).all()
    finally:
        free(x, out)


def test_a_freed_output_drops_the_copies_its_launches_staged():
    from dgvm import backends
    from dgvm.worker.store import ChunkStore

    store = ChunkStore(backends.create("cpu", 8 * 2**20, None), "tcp://here")
    try:
        store.allocate(5, "me", [0, 1], [64, 64])
        store.allocate(6, "me", [0], [64])
        store.stage("launch-a", 5, {0: np.ones(8)})
        store.stage("launch-b", 6, {0: np.ones(8)})
        store.free(5)  # before launch-a's commit: it will never come
        assert store.staged_launches() == 1
        assert store.take_staged("launch-a", [0]) == {}
        assert list(store.take_staged("launch-b", [0])) == [0] and store.staged_launches() == 0
        # A launch that stages after its output was freed (a free that did not wait for
        # its tasks) keeps nothing: no commit will ever take it.
        store.stage("launch-c", 5, {0: np.ones(8)})
        assert store.staged_launches() == 0
    finally:
        store.close()


def test_kernel_error_leaves_every_workers_chunks_as_they_were(case):
    if case.backend == "cuda":
        pytest.skip("GPU kernels raise only when compiled with debug=True")
    h = np.arange(30, dtype=np.int64)[::-1].copy()  # 3 is in the last chunk
    x = dnp.from_numpy(h, chunks=5, placement="round_robin")
    out = dnp.from_numpy(np.full(30, 7, dtype=np.int64), chunks=5, colocate=x)
    try:
        assert len(set(out.locations().values())) == len(case.capacities)
        dgvm.launch(fails, x, out=out)
        with pytest.raises(dgvm.KernelError, match="fails.*chunk 5 .*worker"):
            out.wait()
        out.pending.writes = []  # forget the failed launch, read what the chunks hold
        assert (dnp.asnumpy(out) == 7).all()  # no worker wrote any chunk
        assert set(case.client.run(lambda dask_worker: dask_worker.extensions["dgvm"].staged_launches()).values()) == {0}
        x[26] = 100  # no bad element now: the same kernel commits on every worker
        dgvm.launch(fails, x, out=out)
        expect = h.copy()
        expect[26] = 100
        np.testing.assert_array_equal(dnp.asnumpy(out), expect)
    finally:
        free(x, out)


@dgvm.kernel
def reverse_in_chunk(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[out.size - 1 - i]


def test_a_kernel_reading_its_output_through_an_argument_sees_the_old_values(case):
    # In place, out[0] = x[4] would be read after out[4] = x[0] was written by some
    # thread: the launch runs on a copy of the chunk instead.
    h = np.arange(20, dtype=np.float64)
    x = dnp.from_numpy(h, chunks=5)
    try:
        dgvm.launch(reverse_in_chunk, x, out=x)
        np.testing.assert_array_equal(dnp.asnumpy(x), h.reshape(4, 5)[:, ::-1].reshape(-1))
        y = dnp.zeros(20, chunks=5)
        dgvm.launch(reverse_in_chunk, x, out=y)  # into another array: in place
        np.testing.assert_array_equal(dnp.asnumpy(y), h)
        y.free()
    finally:
        free(x)


def test_mismatched_arrays_raise(case):
    x = dnp.zeros(100, chunks=10)
    y = dnp.zeros(100, chunks=20)
    z = dnp.zeros(90, chunks=10)
    try:
        with pytest.raises(ValueError, match="chunks"):
            dgvm.launch(axpy, 1.0, x, y, out=x)
        with pytest.raises(ValueError, match="shape"):
            dgvm.launch(axpy, 1.0, x, z, out=x)
        with pytest.raises(TypeError):
            dgvm.launch(axpy.pyfunc, 1.0, x, x, out=x)
    finally:
        free(x, y, z)


def test_blocks_argument_and_its_errors(case):
    a = np.arange(48.0).reshape(6, 8)
    x = dnp.from_numpy(a, chunks=(2, 4), placement="round_robin")
    out = dnp.zeros((6, 4), chunks=(2, 4))
    try:
        # out block (i, 0) gets x's block (i, 1): the right half of x
        dgvm.launch(copy2d, dgvm.blocks(x, lambda b: (b[0], 1)), out=out)
        assert np.array_equal(dnp.asnumpy(out), a[:, 4:])
        with pytest.raises(TypeError, match="needs a DArray"):
            dgvm.blocks(a, lambda b: b)
        dgvm.launch(copy2d, dgvm.blocks(x, lambda b: (b[0],)), out=out)
        with pytest.raises(dgvm.KernelError, match="has 1 axes; the array has 2"):
            out.wait()
    finally:
        free(x, out)


@dgvm.kernel
def copy2d(x, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j]
