"""A task that needs only a few rows of a chunk held by another worker (the halo of a
stencil's shifted views) reads those rows' bytes alone from the chunk's home and keeps no
copy (``Access._piece``); a larger part still fetches the chunk as a replica. Results are
NumPy's; the bytes that moved are counted in the workers' stats."""

from __future__ import annotations

import numpy as np

import dgvm
import dgvm.array as dnp


def _moved(client) -> tuple[int, int]:
    """(bytes moved into workers, replicas they hold) over the cluster."""
    stats = dgvm.stats(client=client)["workers"].values()
    moved = sum(p["bytes"] for s in stats for p in s["paths"].values())
    return moved, sum(s.get("replicas", 0) for s in stats)


def test_a_stencil_reads_only_its_neighbours_halo_rows(case):
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
    x.migrate([1, 2], next(w for w in homes if w not in (homes[1], homes[2])))
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
    for dtype in ("int8", "float32", "complex128"):
        h = (np.arange(40 * 30) % 97).astype(dtype).reshape(40, 30)
        x = dnp.from_numpy(h, chunks=(10, 15), placement="round_robin")
        got = dnp.asnumpy(x[9:11, 14:16] + x[19:21, 1:3])  # corners of four chunks each
        np.testing.assert_array_equal(got, h[9:11, 14:16] + h[19:21, 1:3])
        col = dnp.asnumpy(x[:, 14:16] * 1)  # a column strip: spans a chunk's bytes: fetched
        np.testing.assert_array_equal(col, h[:, 14:16])
        x.free()
