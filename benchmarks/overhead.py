"""The fixed time of one dgvm.array operation, on both dispatch planes, beside Dask.

    python benchmarks/overhead.py [--backend auto|cuda|cpu] [--n 4000] [--reps 20]
                                  [--scheduler-process]

For each operation it prints the median wall time on the client with the direct plane
(``dgvm.dispatch.plane: direct``: the caller sends each worker its task and the worker
answers) and with Dask's task path (``tasks``), split for the latter by the task stream
into: before the first task starts on a worker (client work, GVAT allocation, dispatch),
the tasks' run time on the workers (first start to last stop), and after the last task
stops until the caller has its answer (completion messages, the gather). A bare Dask
round trip (one no-op task per worker, submitted and gathered) and the device floor of
the operation's passes over x are printed beside them. Then the requests an operation
makes, alone: a GVAT request, a request to each worker, an allocation like x's and a free.
``--scheduler-process`` runs the cluster's scheduler in a process of its own, as a
deployment with the Dask CLI has it, instead of on this process's event loop.
"""

from __future__ import annotations

import argparse
import logging

import dask
import statistics
import time

import dgvm
import dgvm.array as dnp
from array_ops import chain  # benchmarks/array_ops.py (the script's folder is on sys.path)
from timing import median_time


def _noop(i):
    return i


def split(client, fn, reps):
    """Median (wall, before, run, after) in ms of ``fn()`` over ``reps`` runs."""
    from distributed import get_task_stream

    fn()
    rows = []
    for _ in range(reps):
        with get_task_stream(client) as ts:
            t0 = time.time()
            fn()
            t1 = time.time()
        # Workers shift their clocks by their estimate of the scheduler's: undone here
        # (all processes share this host's clock).
        delay = client.run(lambda dask_worker: dask_worker.scheduler_delay)
        spans = [{"start": s["start"] - delay[task["worker"]], "stop": s["stop"] - delay[task["worker"]]}
                 for task in ts.data for s in task["startstops"] if s["action"] == "compute"]
        if not spans:
            rows.append((t1 - t0, t1 - t0, 0.0, 0.0))
            continue
        start = min(s["start"] for s in spans)
        stop = max(s["stop"] for s in spans)
        rows.append((t1 - t0, start - t0, stop - start, t1 - stop))
    return [1e3 * statistics.median(r[i] for r in rows) for i in range(4)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--n", type=int, default=4000)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--scheduler-process", action="store_true",
                   help="the LocalCluster's scheduler in a process of its own (not this one's event loop)")
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    from dgvm import backends

    backend = backends.resolve(args.backend)
    kw = {} if backend == "cuda" else {"device_memory": "1GiB"}
    n_workers = 2
    if backend == "cuda":  # (one worker per GPU: two where there are, else one)
        from dgvm.backends.cuda import gpu_count

        n_workers = max(1, min(2, gpu_count()))
    client = dgvm.connect(n_workers=n_workers, backend=backend, dashboard_address=None,
                          scheduler_process=args.scheduler_process, **kw)
    try:
        workers = list(client.scheduler_info()["workers"])
        x = dnp.random.random((args.n, args.n), chunks=-(-args.n // 4))
        x.wait()
        ops = {
            "dask round trip (1 no-op task per worker)": lambda: client.gather(
                [client.submit(_noop, i, pure=False, workers=[w]) for i, w in enumerate(workers)]),
            "(x + 1).wait()": lambda: (x + 1).wait(),
            "((2x + 1) x - 3) / (x + 2), .wait()": lambda: chain(x).wait(),
            "float(x.sum())": lambda: float(x.sum()),
            "float((x + x.T).sum())": lambda: float((x + x.T).sum()),
            "x.mean(axis=0).wait()": lambda: x.mean(axis=0).wait(),
        }
        bw = sum(w.bandwidth for w in dgvm.workers(client=client))
        where = "its own process" if args.scheduler_process else "this process"
        print(f"backend {backend}, x {args.n}x{args.n} float64 in 4x4 blocks, {n_workers} workers, the "
              f"scheduler in {where}; "
              f"median of {args.reps} runs, ms")
        print(f"hardware floor: one pass over x (read or write) takes {1e3 * 8 * args.n ** 2 / bw:.2f} ms "
              f"at the {bw / 1e9:.0f} GB/s the workers measured ((x + 1) moves two passes)")
        passes = {"(x + 1).wait()": 2, "((2x + 1) x - 3) / (x + 2), .wait()": 2, "float(x.sum())": 1,
                  "float((x + x.T).sum())": 2, "x.mean(axis=0).wait()": 1}
        floor_ms = 1e3 * 8 * args.n ** 2 / bw
        print(f"{'operation':45s} {'direct':>8s} {'floor':>6s} {'tasks':>8s} {'before':>8s} {'run':>8s} "
              f"{'after':>8s} {'tasks/direct':>12s}")
        for name, fn in ops.items():
            if name.startswith("dask"):
                wall, before, run, after = split(client, fn, args.reps)
                print(f"{name:45s} {'-':>8s} {'-':>6s} {wall:8.2f} {before:8.2f} {run:8.2f} {after:8.2f}")
                continue
            with dask.config.set({"dgvm.dispatch.plane": "direct"}):
                direct = median_time(fn, args.reps) * 1e3
            with dask.config.set({"dgvm.dispatch.plane": "tasks"}):
                wall, before, run, after = split(client, fn, args.reps)
            floor = f"{passes[name] * floor_ms:6.2f}" if name in passes else f"{'-':>6s}"
            print(f"{name:45s} {direct:8.2f} {floor} {wall:8.2f} {before:8.2f} {run:8.2f} {after:8.2f} "
                  f"{wall / direct:11.1f}x")
        # The requests an operation makes, alone (no task).
        from dgvm.array._engine.allocation import allocate
        from dgvm.client.session import call_scheduler, call_workers
        from dgvm.protocol import messages

        requests = {
            f"GVAT request ({messages.WORKERS})": lambda: call_scheduler(messages.WORKERS, client),
            f"worker request ({messages.STORE_INFO}), each worker at once": lambda: call_workers(
                messages.STORE_INFO, {w: {} for w in workers}, client),
        }
        for name, fn in requests.items():
            print(f"{name:45s} {1e3 * median_time(fn, args.reps):8.2f}")
        # An allocation like x's and its free, each timed alone (one at a time: x may
        # take most of the devices' memory); the results kept for reuse go first, or the
        # first allocations would take them over instead of asking the GVAT.
        from dgvm.array._engine.lifecycle import releases_of

        releases_of(client).drain()  # gc, kept allocations freed, releases done
        allocs, frees = [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            a = allocate(x.shape, x.dtype, x.chunks, colocate=x, client=client, zero=False)
            t1 = time.perf_counter()
            a.free()
            allocs.append(t1 - t0)
            frees.append(time.perf_counter() - t1)
        print(f"{'GVAT allocation like x (colocated)':45s} {1e3 * statistics.median(allocs):8.2f}")
        print(f"{'GVAT free of one':45s} {1e3 * statistics.median(frees):8.2f}")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
