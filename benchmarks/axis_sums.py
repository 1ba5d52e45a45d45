"""Sums over the leading axis: the array library's reduction beside a matrix-vector
product, and dgvm's ``x.mean(axis=0)`` beside CuPy's on one GPU.

    python benchmarks/axis_sums.py [--backend auto|cuda|cpu] [--n 40000] [--reps 20]
                                   [--scheduler-process]

First one device, per chunk (an n/4 x n/4 chunk and a narrow n x n/40 one, float64 and
float32), in GB/s: CuPy's (NumPy's on cpu) ``a.sum(axis=0)``, ``ones @ a`` (how dgvm sums
a chunk's leading axes on cuda: ``dgvm/array/_engine/axis_sums.py``) and ``a.sum()``, a
streaming read (the hardware figure). Then the cluster (one worker per GPU, at most two):
dgvm's ``x.mean(axis=0)`` and ``x.sum(axis=0)`` of an n x n float64 array in 4 x 4
blocks, beside the same on one GPU with CuPy (the ratio's target: dgvm at most 1.2x
CuPy's time), and the device floor, one read of x at the bandwidth the workers measured.
``--scheduler-process`` runs the cluster's scheduler in a process of its own, as a
deployment with the Dask CLI has it, instead of on this process's event loop.
On cuda ``--n`` defaults to 40000, less where x would take more than a quarter of a GPU.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

import dgvm
import dgvm.array as dnp
from array_ops import side_fitting  # (the script's folder is on sys.path)
from timing import array_module, device_time, median_time


def per_chunk(xp, n: int, reps: int) -> None:
    print(f"one device, per chunk, GB/s: {xp.__name__}'s a.sum(axis=0), ones @ a, a.sum() (a streaming read)")
    for dtype in ("float64", "float32"):
        for shape in ((n // 4, n // 4), (n, max(1, n // 40))):
            a = xp.asarray(np.random.default_rng(0).random(shape, dtype=np.float64)).astype(dtype)
            ones = xp.ones(shape[0], dtype=dtype)
            rates = [a.nbytes / device_time(xp, fn, reps) / 1e9 for fn in
                     (lambda: a.sum(axis=0), lambda: ones @ a, lambda: a.sum())]
            print(f"  {dtype:8s} {str(shape):16s} " + "  ".join(f"{r:8.0f}" for r in rates))


def default_n(backend: str) -> int:
    if backend != "cuda":
        return 2000
    import cupy

    return side_fitting(cupy.cuda.runtime.memGetInfo()[1] / 4, 1, 40000, step=400)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--scheduler-process", action="store_true",
                   help="the LocalCluster's scheduler in a process of its own (not this one's event loop)")
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    from dgvm import backends

    backend = backends.resolve(args.backend)
    xp = array_module(backend)
    n = args.n or default_n(backend)
    per_chunk(xp, n, args.reps)

    peer = {}
    if backend == "cuda":  # CuPy on one GPU, its array freed before the cluster starts
        c = xp.asarray(np.random.default_rng(1).random((n, n)))
        peer = {"mean(axis=0)": device_time(xp, lambda: c.mean(axis=0), args.reps),
                "sum(axis=0)": device_time(xp, lambda: c.sum(axis=0), args.reps)}
        del c
        xp.get_default_memory_pool().free_all_blocks()

    n_workers = 2
    kw = {"device_memory": "1GiB"}
    if backend == "cuda":
        from dgvm.backends.cuda import gpu_count

        n_workers, kw = max(1, min(2, gpu_count())), {}
    client = dgvm.connect(n_workers=n_workers, backend=backend, dashboard_address=None,
                          scheduler_process=args.scheduler_process, **kw)
    try:
        x = dnp.random.random((n, n), chunks=-(-n // 4))
        x.wait()
        host = dnp.asnumpy(x)
        assert np.allclose(dnp.asnumpy(x.mean(axis=0)), host.mean(axis=0))
        assert np.allclose(dnp.asnumpy(x.sum(axis=0)), host.sum(axis=0))
        del host
        mine = {"mean(axis=0)": median_time(lambda: x.mean(axis=0).wait(), args.reps),
                "sum(axis=0)": median_time(lambda: x.sum(axis=0).wait(), args.reps)}
        bw = sum(w.bandwidth for w in dgvm.workers(client=client))
        floor = 8 * n * n / bw
        where = "its own process" if args.scheduler_process else "this process"
        print(f"\nbackend {backend}, x {n}x{n} float64 in 4x4 blocks, {n_workers} worker(s), the scheduler in "
              f"{where}; median of "
              f"{args.reps} runs, ms; device floor: one read of x at the {bw / 1e9:.0f} GB/s the "
              f"workers measured, {1e3 * floor:.2f} ms")
        print(f"{'operation':14s} {'dgvm':>8s} {'CuPy, 1 GPU':>12s} {'dgvm/CuPy':>10s} {'floor/dgvm':>11s}")
        for op, t in mine.items():
            theirs = f"{1e3 * peer[op]:12.2f} {t / peer[op]:9.2f}x" if op in peer else f"{'-':>12s} {'-':>10s}"
            print(f"x.{op:12s} {1e3 * t:8.2f} {theirs} {floor / t:10.0%}")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
