"""dgvm.array beside dask.array (and single-GPU CuPy) on the same cluster.

    python benchmarks/array_ops.py [--backend auto|cuda|cpu] [--n 40000] [--reps 3]
                                   [--threads 1] [--scheduler-process]

Operations on an ``n x n`` float64 array ``x`` (and ``y``), each timed as the median of
``--reps`` runs after a warm-up, result brought to completion:

- ``(x + x.T).sum()``
- an elementwise chain ``((2 * x + 1) * x - 3) / (x + 2)`` (5 operations), alone and 8
  times in a row, each started before the one before has finished (``y = chain(x)`` in a
  loop, each ``.persist()``-ed; time per chain): one chain waits for its Dask round trip,
  a loop keeps the devices busy meanwhile; and "steady loop", what each chain more adds
  to such a loop ((40 in a row - 8 in a row) / 32), without a run's fixed cost
- ``x @ y`` (at ``--n-matmul``, default n/4), and ``x @ v`` of that matrix and a vector
- ``x.mean(axis=0)``
- ``x[::3]``

dgvm runs owner-computes on the GVAT; dask.array runs the same expression with NumPy
chunks on ``cpu`` and CuPy chunks on ``cuda`` (dask-cuda's LocalCUDACluster under
``dgvm.LocalCluster``), on the same workers, with its inputs persisted there first, twice:
with x's blocks where Dask put them (it may put most on one worker, and then moves
little), and with each block of x on the worker that holds the same block of dgvm's x
(the layout dgvm computes on: half of the transposed blocks live on the other GPU). On
``cuda`` single-GPU CuPy runs the same expressions first, where they fit. dgvm runs the
chain as one fused pass (its elementwise results are deferred), so its GB/s counts what
one pass must move: x read once and the result written once, beside the bandwidth the
workers measured. ``--n-chain`` times the chain alone at a second, larger size, where
the fixed cost of an operation (allocation, one task per worker) weighs less.

On ``cuda`` both defaults follow the memory found: ``--n`` at most 40000, and no larger
than what single-GPU CuPy's run (x, y and the chain's temporaries, ``CUPY_ARRAYS`` arrays
of x's size on one GPU) and the cluster's runs (``CLUSTER_ARRAYS``, spread over the
workers) fit in the GPU's memory less the placement headroom; ``--n-chain`` at most
90000, and no larger than x and the chain loop's results (``CHAIN_ARRAYS``) fit in the
room placement gives on the workers.
"""

from __future__ import annotations

import argparse
import collections
import logging
import math
import sys

import numpy as np

import dgvm
import dgvm.array as dnp
from timing import dask_done, finish_device_work, fresh, median_time, on_device  # benchmarks/timing.py (the script's folder is on sys.path)


def _bytes_sent(dask_worker) -> int:
    return int(getattr(dask_worker, "transfer_outgoing_bytes_total", 0))


def blocks_placed_like(client, locations, n, c, backend):
    """dask.array's x with block (i, j) made and kept on ``locations[(i, j)]``."""
    import dask.array as da

    nb = -(-n // c)
    rows = []
    for i in range(nb):
        row = []
        for j in range(nb):
            shape = (min(c, n - i * c), min(c, n - j * c))
            block = da.random.random(shape, chunks=shape).map_blocks(on_device, backend=backend)
            row.append(client.persist(block, workers=[locations[(i, j)]]))
        rows.append(row)
    return da.block(rows)


def chain(x):
    return ((2.0 * x + 1.0) * x - 3.0) / (x + 2.0)


BACK_TO_BACK = 8
ROW = f"chain, {BACK_TO_BACK} in a row"  # its time is per chain
# Per chain, what each chain more adds to a loop: (a run of LONG - a run of BACK_TO_BACK)
# / (LONG - BACK_TO_BACK). A run's fixed cost (its first dispatch, its last round trip)
# drops out: this is the bandwidth a long loop keeps up.
STEADY = "chain, steady loop"
LONG = 5 * BACK_TO_BACK


def loop_times(run, reps: int) -> dict:
    """Per chain of ``run(k)``, a loop of ``k`` chains: ``ROW``, a run of BACK_TO_BACK;
    ``STEADY``, what each chain more adds to it (from a run of LONG)."""
    short, long = (median_time(lambda: run(k), reps) for k in (BACK_TO_BACK, LONG))
    return {ROW: short / BACK_TO_BACK, STEADY: (long - short) / (LONG - BACK_TO_BACK)}


def chains_back_to_back(x, k=BACK_TO_BACK, alive=2):
    """``y = chain(x)`` ``k`` times, each started before the one before has finished (as
    a loop runs when nothing reads ``y`` in between); returns when all have. ``alive``
    results are kept at a time: each later one reuses the allocation, and so follows the
    tasks, of one dropped before, so the last ones done means all are."""
    ys = collections.deque(maxlen=alive)
    for _ in range(k):
        ys.append(chain(x).persist())
    for y in ys:
        y.wait()


CHAIN_BYTES = 2  # in units of one array's bytes: x read once, the result written once


def cupy_times(n, nm, reps):
    import cupy

    x = cupy.random.random((n, n))
    y = cupy.random.random((nm, nm))
    xm = x[:nm, :nm].copy()
    v = cupy.random.random(nm)

    def sync(v):
        cupy.cuda.Device().synchronize()
        return v

    def chains(x, k):
        for _ in range(k):
            y = chain(x)  # the one before is freed (stream ordered): two in memory at most
        return y

    out = {
        "(x + x.T).sum()": median_time(lambda: sync(float((x + x.T).sum())), reps),
        "elementwise chain": median_time(lambda: sync(chain(x)), reps),
        **loop_times(lambda k: sync(chains(x, k)), reps),
        "x @ y": median_time(lambda: sync(xm @ y), reps),
        "x @ v": median_time(lambda: sync(xm @ v), reps),
        "x.mean(axis=0)": median_time(lambda: sync(x.mean(axis=0)), reps),
        "x[::3]": median_time(lambda: sync(x[::3].copy()), reps),
    }
    del x, y, xm, v
    cupy.get_default_memory_pool().free_all_blocks()
    return out


CUPY_ARRAYS = 5  # x, y and the chain's temporaries, on one GPU
CLUSTER_ARRAYS = 6  # the most arrays of x's size the cluster's runs hold at once
CHAIN_ARRAYS = 4  # x, the two results a loop keeps and the one being made


def side_fitting(room: float, arrays: int, most: int, step: int = 1000) -> int:
    """The largest multiple of ``step``, at most ``most``, whose ``arrays`` float64 arrays
    of side x side fit in ``room`` bytes (at least ``step``)."""
    side = int(math.sqrt(max(room, 0.0) / (8 * arrays)))
    return max(step, min(most, side // step * step))


def default_n(backend: str, workers: int) -> int:
    """``--n``'s default: 3000 on cpu; on cuda sized to the GPU's memory (the module's notes)."""
    if backend != "cuda":
        return 3000
    import cupy

    from dgvm import config

    total = cupy.cuda.runtime.memGetInfo()[1]
    room = total * (1.0 - float(config.get("placement.headroom")))
    return min(side_fitting(0.9 * total, CUPY_ARRAYS, 40000), side_fitting(workers * room, CLUSTER_ARRAYS, 40000))


def default_n_chain(backend: str, ws) -> int | None:
    """``--n-chain``'s default: none on cpu; on cuda sized to the room placement gives."""
    if backend != "cuda":
        return None
    from dgvm import config

    headroom = float(config.get("placement.headroom"))
    room = sum(max(0, w.free - headroom * w.capacity) for w in ws)
    return side_fitting(room, CHAIN_ARRAYS, 90000)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--n", type=int, default=None,
                   help="default: 3000 on cpu; on cuda 40000, or less where the GPUs' memory is smaller")
    p.add_argument("--n-matmul", type=int, default=None)
    p.add_argument("--chunk", type=int, default=None, help="block side (default: n/4)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="threads per worker (default 1, as dask-cuda's)")
    p.add_argument("--scheduler-process", action="store_true",
                   help="the LocalCluster's scheduler in a process of its own (not this one's event loop)")
    p.add_argument("--n-chain", type=int, default=None,
                   help="also time the chain at this size (default: none on cpu; on cuda 90000, or less "
                        "where the workers have less room)")
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)

    import dask.array as da
    from distributed import wait

    from dgvm import backends

    backend = backends.resolve(args.backend)
    n = args.n or default_n(backend, args.workers)
    nm = args.n_matmul or n // 4
    c = args.chunk or -(-n // 4)
    cm = -(-nm // 2)
    nbytes = 8 * n * n
    where = "its own process" if args.scheduler_process else "this process"
    print(f"backend {backend}, {args.workers} workers of {args.threads} thread(s), the scheduler in {where}: "
          f"x is {n}x{n} float64 "
          f"({nbytes / 2**30:.1f} GiB) in blocks of {c}; x @ y at {nm}x{nm}")
    peer = cupy_times(n, nm, args.reps) if backend == "cuda" else {}
    kw = {} if backend == "cuda" else {"device_memory": f"{int(3.5 * nbytes / args.workers) // 2**20 + 256}MiB"}
    client = dgvm.connect(n_workers=args.workers, backend=backend, dashboard_address=None,
                          threads_per_worker=args.threads, scheduler_process=args.scheduler_process, **kw)
    try:
        ws = dgvm.workers()
        bw = sum(w.bandwidth for w in ws)
        x = dnp.random.random((n, n), chunks=c)
        xm = dnp.random.random((nm, nm), chunks=cm)
        ym = dnp.random.random((nm, nm), chunks=cm)
        vm = dnp.random.random(nm, chunks=cm)
        x.wait(), xm.wait(), ym.wait(), vm.wait()
        layout = x.locations()
        addresses = sorted(w.address for w in ws)
        per_worker = [[list(where.values()).count(w) for w in addresses]
                      for where in (layout, xm.locations(), ym.locations())]
        print("dgvm: blocks per worker of x {}, of x @ y's operands {} and {}".format(*per_worker))
        mine = {
            "(x + x.T).sum()": median_time(lambda: float((x + x.T).sum()), args.reps),
            "elementwise chain": median_time(lambda: chain(x).wait(), args.reps),
            **loop_times(lambda k: chains_back_to_back(x, k), args.reps),
            "x @ y": median_time(lambda: (xm @ ym).wait(), args.reps),
            "x @ v": median_time(lambda: (xm @ vm).wait(), args.reps),
            "x.mean(axis=0)": median_time(lambda: x.mean(axis=0).wait(), args.reps),
            "x[::3]": median_time(lambda: x[::3].wait(), args.reps),
        }
        check = dnp.asnumpy(xm @ ym)
        host_x, host_y = dnp.asnumpy(xm), dnp.asnumpy(ym)
        assert np.allclose(check, host_x @ host_y)
        assert np.allclose(dnp.asnumpy(xm @ vm), host_x @ dnp.asnumpy(vm))
        del x, xm, ym, vm
        from dgvm.array._engine.lifecycle import drain_releases

        drain_releases()
        big_chain = None
        nc = args.n_chain or default_n_chain(backend, dgvm.workers())
        if nc:  # before dask.array's arrays take their share of device memory
            print("device memory before the large chain: " + ", ".join(
                f"{w.device} {w.free / 2**30:.0f} GiB free of {w.capacity / 2**30:.0f}" for w in dgvm.workers()))
            xc = dnp.random.random((nc, nc), chunks=-(-nc // 4))
            xc.wait()
            big_chain = (nc, {"elementwise chain": median_time(lambda: chain(xc).wait(), args.reps),
                              **loop_times(lambda k: chains_back_to_back(xc, k), args.reps)})
            del xc
            drain_releases()

        dx = da.random.random((n, n), chunks=c).map_blocks(on_device, backend=backend).persist()
        dxm = da.random.random((nm, nm), chunks=cm).map_blocks(on_device, backend=backend).persist()
        dym = da.random.random((nm, nm), chunks=cm).map_blocks(on_device, backend=backend).persist()
        dvm = da.random.random(nm, chunks=cm).map_blocks(on_device, backend=backend).persist()
        wait([dx, dxm, dym, dvm])
        # Where Dask put x's blocks, and what it moved between workers for the runs below.
        placed = collections.Counter(a for addrs in client.who_has(dx).values() for a in addrs)

        def done(v):
            dask_done(client, backend, v)

        def dask_chains_back_to_back(dx, k=BACK_TO_BACK):
            # As dgvm's: two results in flight; the older one is done before it is
            # dropped (Dask would cancel it otherwise).
            ys = collections.deque()
            for _ in range(k):
                if len(ys) == 2:
                    wait(ys.popleft())
                ys.append(fresh(chain(dx)).persist())
            wait(list(ys))
            finish_device_work(client, backend)

        def sent() -> int:
            return sum(client.run(_bytes_sent).values())

        def dask_runs(dx, extra=()):
            """Median seconds of each operation on ``dx``, and the bytes Dask moved
            between workers for them."""
            ops = {
                "(x + x.T).sum()": lambda: float((dx + dx.T).sum().compute()),
                "elementwise chain": lambda: done(chain(dx)),
                "x.mean(axis=0)": lambda: done(dx.mean(axis=0)),
                "x[::3]": lambda: done(dx[::3]),
                **dict(extra),
            }
            before = sent()
            times = {op: median_time(fn, args.reps) for op, fn in ops.items()}
            times.update(loop_times(lambda k: dask_chains_back_to_back(dx, k), args.reps))
            return times, sent() - before

        theirs, dask_moved = dask_runs(dx, {"x @ y": lambda: done(dxm @ dym), "x @ v": lambda: done(dxm @ dvm)})
        print(f"dask.array: x's {dx.npartitions} blocks on "
              f"{len(placed)} worker(s) {sorted(placed.values())}; its runs moved "
              f"{dask_moved / 2**30:.1f} GiB between workers")
        del dx
        # The same runs with x's blocks where dgvm's are.
        dx = blocks_placed_like(client, layout, n, c, backend)
        wait(dx)
        like, dask_moved = dask_runs(dx)
        spread = collections.Counter(layout.values())
        print(f"dask.array with x's blocks where dgvm's are, {sorted(spread.values())}: its "
              f"runs moved {dask_moved / 2**30:.1f} GiB between workers")
        del dx
        head = (f"{'operation':<20} {'dgvm s':>9} {'dask s':>9} {'dask/dgvm':>10}"
                f" {'dask, dgvm layout s':>20} {'/dgvm':>7}")
        if peer:
            head += f" {'1-GPU CuPy s':>13} {'CuPy/dgvm':>10}"
        print(head)
        for op in mine:
            line = f"{op:<20} {mine[op]:>9.4f} {theirs[op]:>9.4f} {theirs[op] / mine[op]:>9.1f}x"
            line += (f" {like[op]:>20.4f} {like[op] / mine[op]:>6.1f}x" if op in like
                     else f" {'-':>20} {'-':>7}")
            if peer:
                line += f" {peer[op]:>13.4f} {peer[op] / mine[op]:>9.2f}x"
            print(line)
        moved = CHAIN_BYTES * nbytes
        for op in ("elementwise chain", ROW, STEADY):
            print(f"{op}: dgvm {moved / mine[op] / 1e9:.0f} GB/s, dask.array "
                  f"{moved / theirs[op] / 1e9:.0f} GB/s; the workers measured {bw / 1e9:.0f} GB/s "
                  f"of device bandwidth in all: dgvm at {moved / mine[op] / bw:.0%} (target >= 80% on cuda)")
        from dgvm.array._engine import fused

        ways = {w: sorted(set(v.values())) for w, v in client.run(fused.ways_used).items()}
        print(f"fused kernels on the workers: {ways}")
        if big_chain:
            nc, times = big_chain
            big = CHAIN_BYTES * 8 * nc * nc
            for what, t in times.items():
                print(f"{what} at {nc}x{nc} ({8 * nc * nc / 2**30:.0f} GiB), dgvm only (no peer "
                      f"timed at this size): {t:.4f} s, {big / t / 1e9:.0f} GB/s = "
                      f"{big / t / bw:.0%} of the measured {bw / 1e9:.0f} GB/s")
        op = "(x + x.T).sum()"
        print(f"{op}: dgvm {theirs[op] / mine[op]:.1f}x faster than dask.array with x as Dask "
              f"placed it, {like[op] / mine[op]:.1f}x with x's blocks where dgvm's are "
              "(target >= 10x on cuda, where the issue's dask.array took 2.1 s)")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
