"""Allocations of released results are reused by the next result of the same layout
(dgvm.array._engine.recycle): no GVAT request, ordered after the tasks that used them, and never
a stale value or a spurious OutOfDeviceMemory."""

from __future__ import annotations

import gc
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import releases_of


def test_a_loop_reuses_the_released_result(case):
    h = np.random.default_rng(7).random((240, 240))
    x = dnp.from_numpy(h, chunks=60, placement="round_robin")
    y = x * 2.0
    y.wait()
    first = y.alloc_id
    # Read y's transposed blocks elsewhere: replicas of y's chunks on other workers.
    np.testing.assert_allclose(float((y + y.T).sum()), (2 * h + 2 * h.T).sum(), rtol=1e-12)
    del y
    gc.collect()
    ids = set()
    for k in range(3, 8):
        y = x * float(k)
        y.wait()
        ids.add(y.alloc_id)
        # The writer dropped the replicas of the old values: the transpose reads new ones.
        np.testing.assert_allclose(float((y + y.T).sum()), (k * h + k * h.T).sum(), rtol=1e-12)
        np.testing.assert_allclose(dnp.asnumpy(y), k * h, rtol=1e-15)
        del y
        gc.collect()
    assert ids == {first}  # one allocation served the whole loop
    assert case.allocations() == 2  # x and the kept result


def test_an_iterative_solver_allocates_nothing_once_its_loop_runs(case, monkeypatch):
    """Conjugate gradient holds four vectors of one layout and releases one of each per
    step, each after its successor was made; ``r``, reduced and then read twice a step, is
    stored once instead of growing a tree that keeps every step's ``Ap`` alive. Once the
    loop runs, the kept allocations serve the step's results: the only GVAT allocation
    requests left are ``x``'s, stored every few steps (its tree holds the ``p`` of each
    step until then). Re-homing is off: on this cluster of unequal workers it moves the
    vectors' chunks off the matrix's row layout, so each ``A @ p`` (placed by ``A``'s
    rows) finds only kept vectors placed elsewhere."""
    import dask

    from dgvm.client.allocation import AllocationHandle

    monkeypatch.setitem(dask.config.config["dgvm"]["migration"], "rehome-after", 0)

    n = 64
    h = 2.0 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
    A = dnp.from_numpy(h, chunks=16)
    b = dnp.ones(n, chunks=16)
    x = dnp.zeros(n, chunks=16)
    r = b - A @ x
    p, rs = r, r @ r
    made = []
    create = AllocationHandle.create.__func__
    for it in range(32):
        if it == 20:  # past the warm-up (and x stored twice): count the requests
            monkeypatch.setattr(AllocationHandle, "create",
                                classmethod(lambda cls, *a, **kw: made.append(kw) or create(cls, *a, **kw)))
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        assert r.is_stored and p.deferred.inputs[0] is r  # r @ r computed it: stored, read as a leaf
        rs = rs_new
    assert len(made) <= 2  # 12 steps: x stored at most twice (without reuse: 3 a step)
    want = np.linalg.solve(h, np.ones(n))
    np.testing.assert_allclose(dnp.asnumpy(x), want, rtol=1e-6)


def test_explicit_free_and_host_data_are_not_kept(case):
    x = dnp.ones((100, 100), chunks=50)
    y = x + 1
    y.wait()
    y.free()  # an explicit free gives the memory back at once
    z = dnp.from_numpy(np.zeros((100, 100)), chunks=50)
    del z
    from dgvm.array._engine.lifecycle import drain_releases

    gc.collect()
    assert releases_of(case.client).kept.flush() == 0
    drain_releases()
    assert case.allocations() == 1


def test_kept_allocations_give_way_to_an_allocation_that_needs_the_room(case):
    n = int(0.33 * sum(case.capacities)) // 8
    x = dnp.ones((n,), chunks=-(-n // 16))
    y = x + 1  # 33% + 33% of the cluster
    y.wait()
    del y
    gc.collect()
    assert case.allocations() == 2  # y's allocation is kept
    # 33% more fits only once the kept allocation is freed (placement leaves 10% of each
    # device free): no OutOfDeviceMemory.
    z = dnp.zeros((n,), chunks=-(-n // 16))
    assert float(z.sum()) == 0.0
    assert case.allocations() == 2


def test_a_failed_reader_of_a_released_result_does_not_fail_its_successor(case):
    from test_kernels import fails  # raises on an element equal to 3

    if case.backend == "cuda":
        pytest.skip("GPU kernels raise only when compiled with debug=True")
    x = dnp.from_numpy(np.arange(10.0), chunks=5)
    y = x + 0.0
    y.wait()
    first = y.alloc_id
    w = dnp.zeros(10, chunks=5, colocate=x)
    dgvm.launch(fails, y, out=w)  # reads y, fails
    with pytest.raises(dgvm.KernelError):
        w.wait()
    del y
    gc.collect()
    z = x * 3.0  # takes y's allocation over, not its reader's failure
    np.testing.assert_array_equal(dnp.asnumpy(z), np.arange(10.0) * 3)
    assert z.alloc_id == first
    w.pending.writes = []  # the failure was seen
    for a in (x, w, z):  # the KernelError's traceback keeps this frame's arrays alive
        a.free()


OPS = {  # results whose tasks write every element (manipulation._empty)
    "flip": (lambda x: dnp.flip(x, axis=0), lambda a: np.flip(a, axis=0)),
    "rechunk": (lambda x: dnp.rechunk(x, (60, 30)), lambda a: a),
    "broadcast_to": (lambda x: dnp.broadcast_to(x[:1], (120, 120)), lambda a: np.broadcast_to(a[:1], (120, 120))),
    "tile": (lambda x: dnp.tile(x, (1, 2)), lambda a: np.tile(a, (1, 2))),
    "diagonal": (lambda x: dnp.diagonal(x, offset=3), lambda a: np.diagonal(a, offset=3)),
    "matmul": (lambda x: x @ x, lambda a: a @ a),
    "inv": (dnp.linalg.inv, np.linalg.inv),
    "svdvals (packed, then unpacked)": (lambda x: dnp.linalg.svd(x).S, lambda a: np.linalg.svd(a).S),
}


@pytest.mark.parametrize("op", list(OPS))
def test_copies_and_products_reuse_released_results_and_write_them_whole(case, op):
    """Results of manipulations, matrix products and matrix functions are not
    zero-filled (their tasks write every element), so, as elementwise results, a released
    one serves the next of its layout: no stale value of the one before shows through,
    and the next one's task runs after a task still reading the one before."""
    f, ref = OPS[op]
    h = np.random.default_rng(3).random((120, 120))
    ids, reading = set(), None
    for k in range(1, 5):
        x = dnp.from_numpy(k * h, chunks=40, placement="round_robin")
        y = f(x)  # takes over the allocation of the y before, while `reading` may still run
        if reading is not None:
            z, want = reading
            np.testing.assert_allclose(dnp.asnumpy(z), want, rtol=1e-9, atol=1e-12)
        want = ref(k * h)
        np.testing.assert_allclose(dnp.asnumpy(y), want, rtol=1e-9, atol=1e-12)  # cuSOLVER beside LAPACK
        ids.add(y.alloc_id)
        reading = (dnp.rechunk(y, 30), want)  # a task that reads y, not waited for
        del x, y
        gc.collect()
    assert len(ids) == 1  # one allocation served the whole loop
    del reading


def test_each_client_session_keeps_its_own_released_allocations_and_generator(case):
    """Releases, allocations kept for reuse and the random module's generator belong to
    a client session (``dgvm.client.session``): a second client in the process shares
    none of them."""
    from distributed import Client

    from dgvm.array._engine.lifecycle import drain_releases

    other = Client(case.cluster, set_as_default=False)
    try:
        assert releases_of(other) is not releases_of(case.client)
        x = dnp.from_numpy(np.arange(64.0), chunks=16, client=other)
        y = x + 1
        y.wait()
        del y
        gc.collect()
        assert releases_of(case.client).kept.flush() == 0  # not this session's
        assert releases_of(other).kept.flush() == 1
        dnp.random.seed(5)
        dnp.random.seed(5, client=other)
        mine = dnp.asnumpy(dnp.random.random(8))
        theirs = dnp.asnumpy(dnp.random.random(8, client=other))
        np.testing.assert_array_equal(mine, theirs)  # each generator at its first call
        del x
        drain_releases(other)
    finally:
        other.close()


CLIENT_GOES = """
import gc, weakref
import dgvm, dgvm.array as xp
if __name__ == "__main__":
    cluster = dgvm.LocalCluster(n_workers=2, backend="cpu", processes=False, dashboard_address=None)
    client = dgvm.connect(cluster)
    for _ in range(3):
        y = (xp.ones((64, 64), chunks=(16, 16), client=client) + 1).persist()
        del y  # released, perhaps kept for reuse by the session
    client.close(); cluster.close()
    ref = weakref.ref(client)
    del client, cluster
    gc.collect()
    print("client collected:", ref() is None)
"""


def test_a_closed_client_and_its_session_are_collected(tmp_path):
    """The session's parts (releases, kept allocations) hold their client weakly."""
    script = tmp_path / "client_goes.py"
    script.write_text(CLIENT_GOES)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent.parent)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "client collected: True" in out.stdout, out.stdout + out.stderr[-2000:]


def test_a_kept_allocation_whose_chunks_moved_leaves_the_others_takeable():
    """Re-homing moves chunks of kept allocations (their maps go stale). Asked for a
    layout, the pool looks past one whose chunks moved: it takes the next one that is
    still where the result goes, and keeps the moved one for results placed where its
    chunks are now. (Bookkeeping only: the handles here stand for GVAT allocations.)"""
    from types import SimpleNamespace

    from dgvm.array._engine.recycle import KeptAllocations

    class Handle:
        def __init__(self, homes, moved_to=None):
            self._homes, self.moved_to = homes, moved_to
            self.stale, self.freed, self.reusable = moved_to is not None, True, True

        def homes(self):
            return self._homes

        def refresh(self):
            self._homes, self.stale = self.moved_to, False

    freed = []
    pool = KeptAllocations(SimpleNamespace(running=lambda: True), lambda a, f: freed.append(a))
    here, there = ["w0", "w1"], ["w1", "w1"]
    moved, kept = Handle(here, moved_to=there), Handle(here)
    layout = ((4,), np.dtype("f8"), ((2, 2),))
    for h in (moved, kept):
        assert pool.offer(h, *layout, [])
    like = SimpleNamespace(alloc=SimpleNamespace(homes=lambda: here))
    assert pool.take(*layout, like) == (kept, [])  # past the moved one
    assert not kept.freed and moved.freed and freed == []
    assert pool.take(*layout, like) is None  # none is left where ``like``'s chunks are
    elsewhere = SimpleNamespace(alloc=SimpleNamespace(homes=lambda: there))
    assert pool.take(*layout, elsewhere) == (moved, [])  # kept for where it is now
    assert pool.flush() == 0 and freed == []
