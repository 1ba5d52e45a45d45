"""An elementwise launch over many chunks: dgvm beside dask.array on the same cluster.

    python benchmarks/launch.py [--backend auto|cuda|cpu] [--chunks 400] [--chunk-elems 262144]

On a local cluster of 2 workers, computes ``out = a * x + y`` over float32 arrays of
``--chunks`` chunks, with the inputs already in place on the workers:

- **dgvm**: ``dgvm.launch(axpy, a, x, y, out=out)`` then ``out.wait()``: one task per
  worker, the compiled kernel run on each chunk where it lives;
- **dask.array**: ``(a * x + y).persist()`` then ``wait``, with x and y persisted chunk
  by chunk on the same workers (NumPy chunks on ``cpu``, CuPy chunks on ``cuda``): one
  task per chunk.

Prints the median of ``--reps`` runs of each (after one warm-up that compiles the kernel),
the ratio, and the device memory bandwidth each reaches (bytes read and written / time)
beside the bandwidth the workers measured. Target: dgvm at least 3x faster.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
from numba import cuda

import dgvm
import dgvm.array as dnp
from timing import finish_device_work, median_time  # benchmarks/timing.py (the script's folder is on sys.path)


@dgvm.kernel
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--chunks", type=int, default=400)
    p.add_argument("--chunk-elems", type=int, default=None,
                   help="elements per chunk (default: 4Mi on cuda, 256Ki on cpu)")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.WARNING)

    import dask.array as da
    from distributed import wait

    from dgvm import backends

    backend = backends.resolve(args.backend)
    m = args.chunk_elems or (4 * 2**20 if backend == "cuda" else 256 * 2**10)
    n = m * args.chunks
    nbytes = 4 * n
    memory = f"{(6 * nbytes) // 2 // 2**20 + 512}MiB"  # x, y, out per worker, twice over
    client = dgvm.connect(n_workers=2, backend=backend, device_memory=memory, dashboard_address=None)
    try:
        ws = dgvm.workers()
        bw = sum(w.bandwidth for w in ws)
        print(f"backend {backend}: {len(ws)} workers ({', '.join(w.device for w in ws)}); "
              f"{args.chunks} chunks of {m} float32 = {nbytes / 2**20:.0f} MiB per array")
        host = np.random.default_rng(0).random(n, dtype=np.float32)
        a = np.float32(2.0)

        x = dnp.from_numpy(host, chunks=m)
        y = dnp.from_numpy(host, chunks=m, colocate=x)
        out = dnp.empty(n, dtype="float32", chunks=m, colocate=x)

        def run_dgvm():
            dgvm.launch(axpy, a, x, y, out=out)
            out.wait()

        t_dgvm = median_time(run_dgvm, args.reps, "dgvm launch")
        check = dnp.asnumpy(out)
        assert np.allclose(check, a * host + host)
        for arr in (x, y, out):
            arr.free()

        def make(block):  # each chunk made on a worker, as the device's array type
            if backend == "cuda":
                import cupy

                return cupy.asarray(block)
            return block

        dx = da.from_array(host, chunks=m).map_blocks(make).persist()
        wait(dx)
        dy = (dx + np.float32(0)).persist()  # made where dx's chunks are: no transfers later
        wait(dy)

        def run_dask():
            z = (a * dx + dy).persist()
            wait(z)
            finish_device_work(client, backend)
            del z

        t_dask = median_time(run_dask, args.reps, "dask.array")
        moved = 3 * nbytes  # read x and y, write out
        print(f"{'':<12} {'seconds':>9} {'GB/s':>8} {'of device bw':>13}")
        for name, t in (("dgvm", t_dgvm), ("dask.array", t_dask)):
            print(f"{name:<12} {t:>9.4f} {moved / t / 1e9:>8.1f} {moved / t / bw:>12.1%}")
        print(f"dgvm / dask.array speed-up: {t_dask / t_dgvm:.1f}x (target >= 3x); "
              f"device bandwidth measured by the workers: {bw / 1e9:.0f} GB/s in all")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
