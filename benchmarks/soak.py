"""What the scheduler keeps per dgvm operation: a soak on both dispatch planes.

    python benchmarks/soak.py [--backend auto|cuda|cpu] [--cycles 2000] [--n 400]

Runs ``--cycles`` cycles of three array operations (``y = x + 1``, ``y *= 2``,
``float(y.sum())``) on 2 workers, the scheduler in a process of its own, once with
``dgvm.dispatch.plane: direct`` and once with ``tasks`` (Dask's task path), and prints
for each: the scheduler's resident memory growth per 1000 operations (after a warm-up of
200 cycles), and what Dask's task state holds of dgvm's work at the end (tasks, task
groups, task prefixes) and the spans it keeps. Every 100th cycle checks the sum against
NumPy.
"""

from __future__ import annotations

import argparse
import logging

import dask
import numpy as np

import dgvm
import dgvm.array as dnp


def _scheduler_state(dask_scheduler):
    import psutil

    spans = dask_scheduler.extensions.get("spans")
    return {
        "rss": psutil.Process().memory_info().rss,
        "dgvm tasks": sum(1 for k in dask_scheduler.tasks if str(k).startswith("dgvm-")),
        "task groups": len(dask_scheduler.task_groups),
        "task prefixes": len(dask_scheduler.task_prefixes),
        "spans": len(spans.spans) if spans is not None else 0,
    }


def soak(client, plane: str, cycles: int, n: int) -> dict:
    warm = min(200, cycles // 4)
    with dask.config.set({"dgvm.dispatch.plane": plane}):
        x = dnp.random.random((n, n), chunks=n // 2)
        ref = dnp.asnumpy(x)
        start = None
        for i in range(cycles):
            if i == warm:
                dgvm.wait(x)
                start = client.run_on_scheduler(_scheduler_state)
            y = x + 1
            y *= 2
            total = float(y.sum())
            if i % 100 == 0:
                np.testing.assert_allclose(total, ((ref + 1) * 2).sum(), rtol=1e-9)
        end = client.run_on_scheduler(_scheduler_state)
        x.free()
    ops = 3 * (cycles - warm)
    return {"growth MiB per 1000 ops": (end["rss"] - start["rss"]) / 2**20 / ops * 1000,
            **{k: end[k] for k in ("dgvm tasks", "task groups", "task prefixes", "spans")}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--cycles", type=int, default=2000)
    p.add_argument("--n", type=int, default=400)
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    from dgvm import backends

    backend = backends.resolve(args.backend)
    kw = {} if backend == "cuda" else {"device_memory": "256MiB"}
    client = dgvm.connect(n_workers=2, backend=backend, dashboard_address=None, scheduler_process=True, **kw)
    try:
        print(f"backend {backend}, 2 workers, scheduler in its own process; {args.cycles} cycles of "
              f"3 operations on a {args.n}x{args.n} float64 array")
        rows = {plane: soak(client, plane, args.cycles, args.n) for plane in ("direct", "tasks")}
        keys = list(rows["direct"])
        print(f"{'plane':8s}" + "".join(f"{k:>26s}" for k in keys))
        for plane, row in rows.items():
            print(f"{plane:8s}" + "".join(f"{row[k]:26.2f}" if isinstance(row[k], float) else f"{row[k]:26d}"
                                          for k in keys))
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
