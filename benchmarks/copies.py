"""Copies in a loop: flip, rechunk, concat and broadcast_to, beside dask.array on the same cluster.

    python benchmarks/copies.py [--backend auto|cuda|cpu] [--n N] [--reps 15] [--workers 2]

Each operation's result is written whole by its task, so dgvm neither zero-fills it nor,
where the result is placed by its input (all but ``concat``), allocates one: a result
released in a loop serves the next (``dgvm.array._engine.recycle``). Each rep makes ``y = op(x)``,
waits for it and drops it, as a NumPy loop does. Printed per operation: dgvm's median
seconds, dask.array's (NumPy or CuPy blocks, the same chunks, on the same workers, fresh
keys every rep), their ratio, and dgvm's share of the device floor: the bytes the copy must
read and write at the bandwidth the workers measured. dask.array's ``flip``, ``concatenate``
and ``broadcast_to`` give views of its blocks (NumPy's and CuPy's slicing and broadcasting
copy nothing); dgvm's results are arrays of their own, as NumPy's ``flip(x).copy()`` is.
"""

from __future__ import annotations

import argparse
import logging

import dgvm
import dgvm.array as dnp
from timing import dask_done, median_time, on_device  # benchmarks/timing.py (the script's folder is on sys.path)

# name -> (dgvm call, dask.array call, bytes moved per element of x: read + written)
OPS = {
    "flip(x, axis=0)": (lambda x: dnp.flip(x, axis=0), lambda da, x: da.flip(x, axis=0), 2),
    "rechunk(x, rows/8)": (lambda x: dnp.rechunk(x, (x.shape[0] // 8, x.shape[1])),
                           lambda da, x: x.rechunk((x.shape[0] // 8, x.shape[1])), 2),
    "concat([x, x])": (lambda x: dnp.concat([x, x]), lambda da, x: da.concatenate([x, x]), 4),
    "broadcast_to(x[:1], x.shape)": (lambda x: dnp.broadcast_to(x[:1], x.shape),
                                     lambda da, x: da.broadcast_to(x[:1], x.shape), 1),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--n", type=int, default=None, help="x is n x n float64 (default: 20000 on cuda, 4000 on cpu)")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)

    import dask.array as da

    from dgvm import backends

    backend = backends.resolve(args.backend)
    n = args.n or (20000 if backend == "cuda" else 4000)
    c = -(-n // 4)
    nbytes = 8 * n * n
    kw = {} if backend == "cuda" else {"device_memory": f"{int(6 * nbytes / args.workers) // 2**20 + 256}MiB"}
    client = dgvm.connect(n_workers=args.workers, backend=backend, dashboard_address=None,
                          threads_per_worker=1, scheduler_process=True, **kw)
    try:
        bw = sum(w.bandwidth for w in dgvm.workers(client=client))
        x = dnp.random.random((n, n), chunks=c)
        x.wait()
        mine = {name: median_time(lambda fn=fn: fn(x).wait(), args.reps) for name, (fn, _, _) in OPS.items()}
        dx = da.random.random((n, n), chunks=c).map_blocks(on_device, backend=backend).persist()
        theirs = {name: median_time(lambda fn=fn: dask_done(client, backend, fn(da, dx)), args.reps)
                  for name, (_, fn, _) in OPS.items()}
    finally:
        client.close()

    print(f"backend {backend}, {args.workers} workers: x is {n}x{n} float64 ({nbytes / 2**30:.2f} GiB) "
          f"in blocks of {c}; the workers measured {bw / 1e9:.0f} GB/s of device bandwidth in all")
    print(f"{'operation':30} {'dgvm s':>9} {'dask s':>9} {'dask/dgvm':>10} {'dgvm of floor':>14}")
    for name, (_, _, moved) in OPS.items():
        floor = moved * nbytes / bw
        print(f"{name:30} {mine[name]:9.4f} {theirs[name]:9.4f} {theirs[name] / mine[name]:9.1f}x "
              f"{floor / mine[name]:13.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
