"""Matrix functions over a stack of matrices: dgvm.array.linalg beside dask.array and
single-GPU CuPy.

    python benchmarks/linalg.py [--backend auto|cuda|cpu] [--stack 4096] [--n 256] [--reps 3]

A stack of ``--stack`` well-conditioned ``n x n`` float64 matrices (and a right-hand
side per matrix), in 8 chunks along the stack. dgvm runs each function once per matrix
where its chunk lives (``dgvm.array._engine.per_matrix``: cuSOLVER through CuPy on GPUs, LAPACK
through NumPy on ``cpu``); dask.array runs the same function blockwise on the same
workers (``map_blocks`` of CuPy's or NumPy's function on the same chunks); CuPy runs it
on one GPU (``cuda`` only). Each time is the median of ``--reps`` runs after a warm-up,
the result brought to completion. Results are checked against each other.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

import dgvm
import dgvm.array as dnp
from timing import array_module, dask_done, median_time, on_device  # benchmarks/timing.py

OPS = {  # name -> (dgvm.array call, array-module call); x: matrices, b: right-hand sides
    "inv": (lambda x, b: dnp.linalg.inv(x), lambda xp, x, b: xp.linalg.inv(x)),
    "solve": (lambda x, b: dnp.linalg.solve(x, b), lambda xp, x, b: xp.linalg.solve(x, b)),
    "det": (lambda x, b: dnp.linalg.det(x), lambda xp, x, b: xp.linalg.det(x)),
    "cholesky": (lambda x, b: dnp.linalg.cholesky(x), lambda xp, x, b: xp.linalg.cholesky(x)),
    "eigvalsh": (lambda x, b: dnp.linalg.eigvalsh(x), lambda xp, x, b: xp.linalg.eigvalsh(x)),
}


def stack(s, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((s, n, n)) / np.sqrt(n)
    return a @ np.swapaxes(a, -1, -2) + np.eye(n), rng.standard_normal((s, n, 2))


def cupy_times(a, b, reps):
    import cupy

    x, y = cupy.asarray(a), cupy.asarray(b)

    def run(fn):
        out = fn(cupy, x, y)
        cupy.cuda.Device().synchronize()
        return out

    return {name: median_time(lambda: run(fn), reps) for name, (_, fn) in OPS.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--stack", type=int, default=None, help="matrices (default 4096 on cuda, 256 on cpu)")
    p.add_argument("--n", type=int, default=None, help="matrix side (default 256 on cuda, 64 on cpu)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)

    import dask.array as da
    from distributed import wait

    from dgvm import backends

    backend = backends.resolve(args.backend)
    s = args.stack or (4096 if backend == "cuda" else 256)
    n = args.n or (256 if backend == "cuda" else 64)
    a, b = stack(s, n)
    print(f"backend {backend}, {args.workers} workers: {s} matrices of {n}x{n} float64 "
          f"({a.nbytes / 2**30:.2f} GiB) in 8 chunks")
    peer = cupy_times(a, b, args.reps) if backend == "cuda" else {}
    kw = {} if backend == "cuda" else {"device_memory": f"{int(6 * a.nbytes / args.workers) // 2**20 + 256}MiB"}
    client = dgvm.connect(n_workers=args.workers, backend=backend, dashboard_address=None,
                          threads_per_worker=1, **kw)  # as dask-cuda's workers
    try:
        c = -(-s // 8)
        x = dnp.from_numpy(a, chunks=(c, n, n))
        y = dnp.from_numpy(b, chunks=(c, n, 2))
        mine = {name: median_time(lambda: fn(x, y).wait(), args.reps) for name, (fn, _) in OPS.items()}
        got = {name: dnp.asnumpy(fn(x, y)) for name, (fn, _) in OPS.items()}

        dx = da.from_array(a, chunks=(c, n, n)).map_blocks(on_device, backend=backend).persist()
        dy = da.from_array(b, chunks=(c, n, 2)).map_blocks(on_device, backend=backend).persist()
        wait([dx, dy])

        def dask_op(name, fn):
            def block(xb, yb):
                return fn(array_module(backend), xb, yb)

            shape = {"solve": {"chunks": dy.chunks}, "det": {"drop_axis": [1, 2]},
                     "eigvalsh": {"drop_axis": [2]}}.get(name, {})
            return da.map_blocks(block, dx, dy, dtype=np.float64, **shape)

        theirs = {}
        for name, (_, fn) in OPS.items():
            def go(name=name, fn=fn):
                return dask_done(client, backend, dask_op(name, fn))

            theirs[name] = median_time(go, args.reps)
            ref = go().compute()
            ref = ref.get() if hasattr(ref, "get") else ref
            assert np.allclose(got[name], np.asarray(ref), rtol=1e-6, atol=1e-8), name
    finally:
        client.close()  # and the cluster dgvm.connect started

    head = f"{'function':10} {'dgvm s':>9} {'dask.array s':>13} {'dask/dgvm':>10}"
    if peer:
        head += f" {'1-GPU CuPy s':>13} {'CuPy/dgvm':>10}"
    print(head)
    for name in OPS:
        row = f"{name:10} {mine[name]:9.4f} {theirs[name]:13.4f} {theirs[name] / mine[name]:9.1f}x"
        if peer:
            row += f" {peer[name]:13.4f} {peer[name] / mine[name]:9.1f}x"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
