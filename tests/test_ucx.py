"""dgvm over UCX (``protocol="ucx"``, distributed-ucxx): the scheduler, the workers and the
direct plane speak UCX, and chunks that cross between workers over Dask's comm (the path
between hosts; forced here with ``dgvm.transfer.same-host: false``) travel over it too, as
NVLink or InfiniBand carry them between hosts. GPU only; skipped where distributed-ucxx is
not installed (``pip install distributed-ucxx-cu13``, or ``-cu12``, matching the CUDA of
CuPy)."""

from __future__ import annotations

import dask
import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.backends.cuda import gpu_count

pytestmark = pytest.mark.gpu


def test_operations_and_moves_over_ucx():
    pytest.importorskip("distributed_ucxx")
    if gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    with dask.config.set({"dgvm.transfer.same-host": False}):
        cluster = dgvm.LocalCluster(n_workers=2, backend="cuda", protocol="ucx", dashboard_address=None)
        client = dgvm.connect(cluster)
        try:
            workers = [w.address for w in dgvm.workers(client=client)]
            assert all(a.startswith("ucx") for a in workers), workers
            h = np.random.default_rng(3).random((2048, 2048))
            x = dnp.from_numpy(h, chunks=512, placement="round_robin")
            np.testing.assert_allclose(dnp.asnumpy(x + x.T), h + h.T)  # transposes read remote chunks
            assert float((x * 2).sum()) == pytest.approx(float((h * 2).sum()), rel=1e-12)
            x.migrate(list(range(x.alloc.nchunks)), workers[0])
            assert set(x.alloc.homes()) == {workers[0]}
            np.testing.assert_array_equal(dnp.asnumpy(x), h)
            paths = [s["paths"] for s in dgvm.stats(client=client)["workers"].values()]
            moved = sum(p.get("comm", {}).get("bytes", 0) for p in paths)
            assert moved >= h.nbytes // 2, paths  # the moves and misses crossed over UCX
            assert not any("cuda_ipc" in p for p in paths)
            x.free()
        finally:
            client.close()
            cluster.close()
