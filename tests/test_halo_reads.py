"""A task that needs only a few rows of a chunk held by another worker (the halo of a
stencil's shifted views) reads those rows' bytes alone from the chunk's home and keeps no
copy (``Access._piece``); a larger part still fetches the chunk as a replica. Results are
NumPy's; the bytes that moved are counted in the workers' stats."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp


def _moved(client) -> tuple[int, int]:
    """(bytes moved into workers, replicas they hold) over the cluster."""
    stats = dgvm.stats(client=client)["workers"].values()
    moved = sum(p["bytes"] for s in stats for p in s["paths"].values())
    return moved, sum(s.get("replicas", 0) for s in stats)


def test_a_stencil_reads_only_its_neighbours_halo_rows(case):
    case.needs_workers(2, "halo rows come from a neighbour")
    n, rows = 96, 24  # four row blocks of 24 x 96, spread over the workers
    h = np.random.default_rng(7).random((n, n))
    x = dnp.from_numpy(h, chunks=(rows, n), placement="round_robin")
    assert len(set(x.alloc.homes())) > 1
    before, _ = _moved(case.client)
    want = h.copy()
    for _ in range(3):
        inner = 0.25 * (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])
        x[1:-1, 1:-1] = inner
        want[1:-1, 1:-1] = 0.25 * (want[:-2, 1:-1] + want[2:, 1:-1] + want[1:-1, :-2] + want[1:-1, 2:])
        np.testing.assert_allclose(dnp.asnumpy(x), want, rtol=1e-12)
    moved, _ = _moved(case.client)
    # Each iteration reads at most two halo rows per block boundary (and a result block's
    # few rows where its chunking differs), never a whole 24-row chunk again.
    assert 0 < moved - before < 3 * 8 * (2 * 4 * n) * 8, moved - before
    # A chunk whose home moved: the workers that read its rows learn its new home.
    homes = x.alloc.homes()
    others = [w for w in homes if w not in (homes[1], homes[2])]
    # (to a third worker where there is one; on two, chunk 1 joins chunk 2's home)
    x.migrate([1, 2], others[0] if others else homes[2])
    for _ in range(2):
        x[1:-1, 1:-1] = 0.25 * (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])
        want[1:-1, 1:-1] = 0.25 * (want[:-2, 1:-1] + want[2:, 1:-1] + want[1:-1, :-2] + want[1:-1, 2:])
        np.testing.assert_allclose(dnp.asnumpy(x), want, rtol=1e-12)
    inner = None
    x.free()


def test_a_large_part_of_a_remote_chunk_is_fetched_whole_and_kept(case):
    h = np.arange(64.0 * 64).reshape(64, 64)
    x = dnp.from_numpy(h, chunks=(32, 64), placement="round_robin")
    y = dnp.from_numpy(h, chunks=(32, 64), placement="round_robin")
    # y's blocks shifted by half a block: each output block needs half of a remote chunk
    z = x[16:48] + y[0:32]
    np.testing.assert_array_equal(dnp.asnumpy(z), h[16:48] + h[0:32])
    np.testing.assert_array_equal(dnp.asnumpy(x[31:33] * 2), h[31:33] * 2)  # a piece again
    z = None
    x.free()
    y.free()


def test_pieces_of_every_dtype_and_axis_come_back_as_numpys(case):
    case.needs_workers(2, "pieces come from another worker")
    for dtype in ("int8", "float32", "complex128"):
        h = (np.arange(40 * 30) % 97).astype(dtype).reshape(40, 30)
        x = dnp.from_numpy(h, chunks=(10, 15), placement="round_robin")
        got = dnp.asnumpy(x[9:11, 14:16] + x[19:21, 1:3])  # corners of four chunks each
        np.testing.assert_array_equal(got, h[9:11, 14:16] + h[19:21, 1:3])
        col = dnp.asnumpy(x[:, 14:16] * 1)  # a column strip: spans a chunk's bytes: fetched
        np.testing.assert_array_equal(col, h[:, 14:16])
        x.free()
    # Chunks of one row: a few elements of a neighbour's row are a piece of their own
    # bytes (its whole row would be the whole chunk).
    h = np.arange(8 * 40_000.0).reshape(8, 40_000)
    r = dnp.from_numpy(h, chunks=(1, 40_000), placement="round_robin")
    before, _ = _moved(case.client)
    got = dnp.asnumpy(r[:-1, 100:2100] + r[1:, 100:2100])  # (past small_reads' size)
    np.testing.assert_array_equal(got, h[:-1, 100:2100] + h[1:, 100:2100])
    moved, _ = _moved(case.client)
    assert 0 < moved - before <= 7 * 2000 * 8, moved - before
    got = None
    r.free()


def _gathered(client) -> int:
    """Regions the workers' ops read from several chunks into a new array."""
    return sum(s["gathered"] for s in dgvm.stats(client=client)["workers"].values())


def test_a_stencil_step_reads_views_and_pieces_never_a_gathered_copy(case):
    """Each output chunk is cut where its leaves cross their inputs' block edges: inner
    rows read views of the local chunk, end rows pieces of the neighbours, asked for
    before the inner rows are computed. Nothing is
    gathered into a copy of the region, in the fused assignment between two grids, in a
    step that reads its own target (computed whole first, then copied in) and in an
    elementwise result over views of differently chunked arrays."""
    case.needs_workers(2, "pieces come from another worker")
    client = case.client
    n = 64
    h = np.random.default_rng(3).random((n, n))
    u = dnp.from_numpy(h, chunks=(16, n), placement="round_robin")
    v = dnp.zeros_like(u)
    want_u, want_v = h.copy(), np.zeros_like(h)
    before = _gathered(client)
    ahead = sum(s["ahead"] for s in dgvm.stats(client=client)["workers"].values())
    for _ in range(3):
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        want_v[1:-1, 1:-1] = 0.25 * (want_u[:-2, 1:-1] + want_u[2:, 1:-1] + want_u[1:-1, :-2] + want_u[1:-1, 2:])
        u[1:-1, 1:-1] = 0.5 * (u[:-2, 1:-1] + u[2:, 1:-1]) - v[1:-1, 1:-1]
        want_u[1:-1, 1:-1] = 0.5 * (want_u[:-2, 1:-1] + want_u[2:, 1:-1]) - want_v[1:-1, 1:-1]
    np.testing.assert_allclose(dnp.asnumpy(v), want_v, rtol=1e-12)
    np.testing.assert_allclose(dnp.asnumpy(u), want_u, rtol=1e-12)
    # A chunk's pieces are asked for together, before its inner part runs (the homes are
    # known after the first step).
    assert sum(s["ahead"] for s in dgvm.stats(client=client)["workers"].values()) > ahead
    g = np.arange(60.0)
    a = dnp.from_numpy(g, chunks=7, placement="round_robin")
    b = dnp.from_numpy(g * 3, chunks=11, placement="round_robin")
    np.testing.assert_array_equal(dnp.asnumpy(a[::-2] + b[29::-1] * a[1:61:2]), g[::-2] + (g * 3)[29::-1] * g[1:61:2])
    assert _gathered(client) == before
    for x in (u, v, a, b):
        x.free()


def test_parts_of_an_output_chunk_read_one_block_of_each_leaf(monkeypatch):
    """``Elementwise.boxes`` over random views (steps of either sign, permuted axes,
    broadcast leaves) and chunkings: the parts tile the chunk, and each leaf's region of
    each part lies within one block of its input; past ``MAX_BOXES`` parts the chunk
    stays whole."""
    from dgvm.array._engine import tree_op
    from dgvm.array._engine.tree_op import Elementwise
    from dgvm.array._engine.views import View

    rng = np.random.default_rng(11)

    class Arr:  # what View needs of an input: shape and chunks
        def __init__(self, shape, chunks):
            self.shape, self.chunks, self.ndim = shape, chunks, len(shape)

    def chunking(n):
        cuts = sorted(set(rng.integers(1, n, rng.integers(0, 4)).tolist()))
        return tuple(np.diff([0, *cuts, n]).tolist())

    def case():
        out = tuple(int(v) for v in rng.integers(2, 9, 2))
        views, shapes, edges = [], [], []
        for _ in range(rng.integers(1, 4)):
            if rng.random() < 0.2:  # a row broadcast over the output
                shape, view, arr = (out[1],), None, Arr((out[1],), (chunking(out[1]),))
            else:
                order = (0, 1) if rng.random() < 0.6 else (1, 0)  # view axis k walks input axis order[k]
                in_shape, key = [0, 0], [None, None]
                for k, a in enumerate(order):
                    step = int(rng.choice([1, 1, 2, -1, -3]))
                    first = int(rng.integers(0, 4))  # the first element's distance from its end
                    in_shape[a] = first + abs(step) * (out[k] - 1) + 1 + int(rng.integers(0, 3))
                    start = first if step > 0 else in_shape[a] - 1 - first
                    stop = start + step * out[k]
                    key[a] = slice(start, stop if stop >= 0 else None, step)
                arr = Arr(tuple(in_shape), tuple(chunking(n) for n in in_shape))
                view = View.of_key(arr, key, [])
                if order == (1, 0):
                    view = view.then(View.of_axes(Arr(view.shape, view.chunks), (1, 0)))
                shape = view.shape
            assert tuple(shape) == out[-len(shape):], (shape, out)
            views.append(view)
            shapes.append(shape)
            edges.append([np.concatenate([[0], np.cumsum(c)]).tolist() for c in arr.chunks])
        lo = [int(rng.integers(0, n)) for n in out]
        hi = [int(rng.integers(l + 1, n + 1)) for l, n in zip(lo, out)]
        return Elementwise(("in", 0), shapes, out, views), edges, lo, hi

    split = 0
    monkeypatch.setattr(tree_op, "MAX_BOXES", 10**6)
    for _ in range(300):
        op, edges, lo, hi = case()
        parts = op.boxes(lo, hi, lambda i, a: edges[i][a])
        covered = np.zeros(op.shape, int)
        for blo, bhi in parts:
            covered[blo[0]:bhi[0], blo[1]:bhi[1]] += 1
            for i in range(len(op.shapes)):
                rlo, rhi = op.region(i, blo, bhi)
                for a, (l, h) in enumerate(zip(rlo, rhi)):
                    first, last = np.searchsorted(edges[i][a], [l, h - 1], side="right")
                    assert first == last, (i, a, rlo, rhi, edges[i][a], parts)
        expect = np.zeros(op.shape, int)
        expect[lo[0]:hi[0], lo[1]:hi[1]] = 1
        np.testing.assert_array_equal(covered, expect)
        split += len(parts) > 1
        if len(parts) > 2:  # the cap: one part, the chunk whole
            with monkeypatch.context() as m:
                m.setattr(tree_op, "MAX_BOXES", len(parts) - 1)
                assert op.boxes(lo, hi, lambda i, a: edges[i][a]) == [(lo, hi)]
    assert split > 100, split


def replicas(client, x) -> list:
    """The read replicas of ``x``'s chunks each worker holds."""
    return list(client.run(lambda dask_worker, i=x.alloc_id: dask_worker.extensions["dgvm"].replicas(i)).values())


def test_a_chunk_rewritten_between_reads_elsewhere_is_read_as_a_piece(case):
    """A worker whose read replica of a chunk a write made stale reads that chunk whole as
    a piece next time (one request to its home: nothing registered, no copy that the next
    write must reach), up to ``REWRITTEN_READS`` times before the chunk's next write, then
    copies it as a replica again. Every product is NumPy's."""
    case.needs_workers(2, "pieces come from another worker")
    from dgvm.worker.access import REWRITTEN_READS

    rng = np.random.default_rng(3)
    h, hv = rng.random((64, 64)), rng.random(64)
    A = dnp.from_numpy(h, chunks=16, placement="round_robin")
    v = dnp.from_numpy(hv, chunks=16, placement="round_robin")

    def pieces():
        return sum(s["transient"] for s in dgvm.stats()["workers"].values())

    before = pieces()
    np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)  # v's chunks replicated where rows need them
    assert pieces() == before
    for _ in range(REWRITTEN_READS + 3):  # written every step: pieces every step, never a replica
        v *= 0.5  # a write: those replicas are stale, and dropped
        hv = hv * 0.5
        before = pieces()
        np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)
        assert pieces() > before  # read as pieces
        assert not any(replicas(case.client, v))
    for _ in range(REWRITTEN_READS):  # read again and again, unwritten: replicas again
        np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)
    before = pieces()
    np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)
    assert pieces() == before


def test_a_piece_of_a_chunk_whose_move_ended_is_read_from_its_new_home(case):
    """A worker reads a rewritten chunk as a piece from the home it last knew. If the chunk
    moved since and the old home has not yet let go of it (its release is late), the
    old home's copy may be stale by then: it says the chunk is leaving, and the reader
    asks the GVAT, which names the new home."""
    import time

    client = case.client
    rng = np.random.default_rng(3)
    h, hv = rng.random((64, 64)), rng.random(64)
    A = dnp.from_numpy(h, chunks=16, placement="round_robin")
    v = dnp.from_numpy(hv, chunks=16, placement="round_robin")
    np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)  # read replicas of v's chunks
    held = client.run(lambda dask_worker, i=v.alloc_id: dask_worker.extensions["dgvm"].replicas(i))
    if len(held) < 3:
        pytest.skip("needs a third worker to move the chunk to")
    homes = v.alloc.homes()
    c, home, reader = next((c, homes[c], w) for w, r in held.items() for c in r)
    other = next(w for w in held if w not in (home, reader))
    v *= 0.5
    hv = hv * 0.5
    np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)  # the reader reads v[c] as a piece

    def late_release(dask_worker, delay):
        store = dask_worker.extensions["dgvm"]
        if delay is None:
            store.__dict__.pop("release", None)
            return
        release = type(store).release.__get__(store)
        store.release = lambda *a, **k: (time.sleep(delay), release(*a, **k))[1]

    client.run(late_release, delay=3.0, workers=[home])
    try:
        v.migrate([c], other)
        v *= 0.5  # written at its new home while the old one still holds its copy
        hv = hv * 0.5
        v.wait()
        np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)
    finally:
        client.run(late_release, delay=None, workers=[home])
        time.sleep(3.5)  # the late release ends before the next test


@contextlib.contextmanager
def not_serving(client, worker: str, handler: str):
    """``worker`` answers ``handler`` with nothing, as a worker that is closing does: its
    ``teardown`` drops its handlers before the scheduler removes it. The grace every
    process gives a peer that may be leaving is short meanwhile (``LeftPeers.call``)."""
    def swap(dask_worker, on):
        kept = dask_worker.extensions["dgvm"].__dict__
        if not on:
            kept["_dgvm_kept"] = dask_worker.handlers.pop(handler)
        elif "_dgvm_kept" in kept:
            dask_worker.handlers[handler] = kept.pop("_dgvm_kept")

    def short(left_peers, on):  # (once per process: an in-process cluster's share the module)
        if not on and not hasattr(left_peers, "_dgvm_grace_kept"):
            left_peers._dgvm_grace_kept, left_peers.GRACE = left_peers.GRACE, 0.2
        elif on and hasattr(left_peers, "_dgvm_grace_kept"):
            left_peers.GRACE = left_peers._dgvm_grace_kept
            del left_peers._dgvm_grace_kept

    def grace(on):
        from dgvm.transfer import left_peers

        short(left_peers, on)

    try:
        client.run(swap, on=False, workers=[worker])
        client.run(grace, on=False)
        client.run_on_scheduler(grace, on=False)
        yield
    finally:
        client.run(swap, on=True, workers=[worker])
        client.run(grace, on=True)
        client.run_on_scheduler(grace, on=True)


def test_a_home_that_no_longer_serves_exports_is_an_error_naming_it_not_a_raw_one(case):
    """A worker that is closing has dropped its handlers (``teardown``) before the
    scheduler removes it: it answers a request for its chunks with nothing. A read of
    one by another worker's task, and a move of one, fail saying that worker no longer
    serves them (after the wait for news that it left), not with a ``TypeError`` of the
    empty answer; and once it serves them again, both work and nothing was lost."""
    from dgvm.protocol import messages

    case.needs_workers(2, "a chunk read from another worker")
    client = case.client
    h = np.arange(64 * 8, dtype=np.float64).reshape(64, 8)
    x = dnp.from_numpy(h, chunks=(16, 8), placement="round_robin")
    homes = x.alloc.homes()
    closing, reader = homes[1], homes[0]

    with not_serving(client, closing, messages.EXPORT):
        with pytest.raises(dgvm.DgvmError, match=f"{closing} no longer serves {messages.EXPORT}"):
            (x[:-2] + x[2:]).wait()  # chunk 0's task reads chunk 1's first rows
        with pytest.raises(dgvm.DgvmError, match=f"{closing} no longer serves {messages.EXPORT}"):
            x.migrate([1], reader)
    z = x[:-2] + x[2:]
    z.wait()
    np.testing.assert_array_equal(dnp.asnumpy(z), h[:-2] + h[2:])
    x.migrate([1], reader)
    assert x.alloc.homes()[1] == reader
    np.testing.assert_array_equal(dnp.asnumpy(x), h)


def test_a_write_forwarded_to_a_home_that_no_longer_serves_writes_is_not_taken_for_done(case):
    """A task whose output chunk moved away sends its value to the chunk's new home
    (``tasks.forward``). A home that is closing answers with nothing: the write is not
    done, and the task says so, rather than reporting the chunk written."""
    from dgvm.protocol import messages

    case.needs_workers(2, "a write forwarded to another worker")
    client = case.client
    x = dnp.from_numpy(np.zeros((4, 8)), chunks=(1, 8), placement="round_robin")
    homes = x.alloc.homes()
    closing, writer = homes[1], homes[0]
    out = {"alloc_id": x.alloc.alloc_id, "owner": x.alloc.owner}

    async def forward_one(dask_worker, out, home):
        import asyncio
        import types

        from dgvm.protocol.messages import Where
        from dgvm.worker import tasks

        plugin = dask_worker.plugins[messages.STORE_PLUGIN]
        access = types.SimpleNamespace(worker=dask_worker, transfers=plugin.transfers,
                                       locate=lambda alloc_id, k: Where(home=home, path="comm", version=0))
        try:
            await asyncio.get_running_loop().run_in_executor(None, tasks.forward, access, types.SimpleNamespace(
                **out), 1, np.ones(8).view(np.uint8))
            return "taken"
        except Exception as e:  # noqa: BLE001
            return f"{type(e).__name__}: {e}"

    with not_serving(client, closing, messages.WRITE):
        answer = client.run(forward_one, out=out, home=closing, workers=[writer])[writer]
    assert f"{closing} no longer serves {messages.WRITE}" in answer, answer
    np.testing.assert_array_equal(dnp.asnumpy(x), np.zeros((4, 8)))  # nothing was written
    x.free()


def test_a_write_whose_copy_holder_is_closing_is_done_and_its_other_copies_dropped(case):
    """A write drops the read replicas of what it wrote before it is answered. A holder
    that is closing (it no longer serves the drop) took its replica with it: the write is
    done and said done, not failed on its home with that holder's error, and the other
    holders' replicas are dropped all the same."""
    from dgvm.protocol import messages

    case.needs_workers(3, "a write's home and two workers holding copies")
    client = case.client
    rng = np.random.default_rng(5)
    h, hv = rng.random((64, 64)), rng.random(64)
    A = dnp.from_numpy(h, chunks=16, placement="round_robin")
    v = dnp.from_numpy(hv, chunks=16, placement="round_robin")
    np.testing.assert_allclose(dnp.asnumpy(A @ v), h @ hv)  # v's chunks copied where A's rows need them
    held = {w: r for w, r in client.run(lambda dask_worker, i=v.alloc_id: dask_worker.extensions["dgvm"].replicas(i)).items() if r}
    if len(held) < 2:
        pytest.skip(f"needs copies on two workers: {held}")
    closing = sorted(held)[0]

    async def drop(dask_worker, alloc_id):  # (it serves again: the replica the GVAT forgot goes)
        await dask_worker.plugins[messages.STORE_PLUGIN].drop_replicas(
            alloc_id, dask_worker.extensions["dgvm"].replicas(alloc_id))

    try:
        with not_serving(client, closing, messages.DROP_REPLICAS):
            v.write_blocks(hv * 2)  # the put path: its home's report awaits every drop
    finally:
        client.run(drop, alloc_id=v.alloc_id, workers=[closing])
    others = {w: r for w, r in client.run(lambda dask_worker, i=v.alloc_id: dask_worker.extensions["dgvm"].replicas(i)).items()
              if w != closing and r}
    assert not others, f"replicas left after the write: {others}"
    np.testing.assert_allclose(dnp.asnumpy(v), hv * 2)


def test_a_chunk_its_home_fails_to_read_is_an_error_naming_it_not_a_chunk_that_keeps_moving(case):
    """The home of a chunk a task reads fails to read it (a device fault: CUDA's errors are
    ``RuntimeError``s) while the chunk stays there: the reader's task fails saying so, not
    after asking the GVAT again and again for a chunk that never moved."""
    from dgvm.protocol import messages

    case.needs_workers(2, "a chunk read from another worker")
    client = case.client
    h = np.arange(64 * 8, dtype=np.float64).reshape(64, 8)
    x = dnp.from_numpy(h, chunks=(16, 8), placement="round_robin")
    failing = x.alloc.homes()[1]

    def fault(dask_worker, on):
        path = dask_worker.plugins[messages.STORE_PLUGIN].transfers["comm"]
        if on:
            def export(*args, **kwargs):
                raise RuntimeError("an illegal memory access was encountered")

            path.export = export
        else:
            path.__dict__.pop("export", None)

    try:
        client.run(fault, on=True, workers=[failing])
        with pytest.raises(dgvm.DgvmError, match=f"on {failing} could not be read.*illegal memory access"):
            (x[:-2] + x[2:]).wait()  # chunk 0's task reads chunk 1's first rows
    finally:
        client.run(fault, on=False, workers=[failing])
    z = x[:-2] + x[2:]
    z.wait()
    np.testing.assert_array_equal(dnp.asnumpy(z), h[:-2] + h[2:])
