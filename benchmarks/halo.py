"""Where a stencil step's time goes on more than one device: its halo reads and its tasks.

    python benchmarks/halo.py [--backend auto|cuda|cpu] [--workers 1,2,4] [--mib M] [--steps 20]

One 5-point Jacobi step, ``v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
+ u[1:-1, 2:])`` then ``u, v = v, u``, on a grid of one square band of ``--mib`` MiB per
worker (default on cuda 1024, on cpu 8), weak-scaled over ``--workers`` devices. Printed
for each count, beside the single-device peer (CuPy on cuda, NumPy on cpu) at the
one-device size and the device floor (the step reads u and writes v: two passes at the
bandwidth the workers measured):

- ms per step (median of the steps' wall times over ``--steps`` steps after a warm-up);
- per worker, from its store's counters over the timed steps: pieces read from
  neighbours, of them asked ahead (``Access.prefetch``), ms per step from asking to having
  them, ms per step of the copies alone, and regions gathered into a copy (none expected);
- from the workers' operation events (start and stop of each task on each worker): the
  median task's run, the longest per step, and the median gap from one step's last task
  end to the next step's first task start (the round trip through the caller).

Each figure of the one-device step beside the n-device one says how much of the step is
the halo (its reads and the parts they feed) and how much the ordering of steps.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import dgvm
import dgvm.array as dnp
from dgvm.protocol import messages
from timing import array_module, median_time  # benchmarks/timing.py


def step(xp, u, v):
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])


def single_device(backend: str, side: int, reps: int) -> float:
    """The peer's seconds per step on one device, the one-worker size."""
    xp = array_module(backend)
    u = xp.zeros((side, side))
    u[1:-1, 1:-1] = 1.0
    v = u.copy()

    def run():
        nonlocal u, v
        step(xp, u, v)
        u, v = v, u
        if backend == "cuda":
            xp.cuda.Device().synchronize()

    return median_time(run, reps)


def counters(client) -> dict:
    return {w: (dict(s["paths"].get("comm", {})), s.get("ahead", 0), s.get("gathered", 0))
            for w, s in dgvm.stats(client=client)["workers"].items()}


def band(backend: str, mib: float | None):
    """(side, bytes, cluster keywords) of one square float64 band of ``mib`` MiB per
    worker (default on cuda 1024, on cpu 8, with a cpu device that holds four)."""
    mib = mib or (1024.0 if backend == "cuda" else 8.0)
    side = int((mib * 2**20 / 8) ** 0.5)
    nbytes = side * side * 8
    return side, nbytes, {} if backend == "cuda" else {"device_memory": f"{4 * nbytes // 2**20 + 64}MiB"}


def grids(client, n: int, side: int, warm: int = 3):
    """The two grids of one ``side`` x ``side`` band per worker, after ``warm`` steps
    (kernels compiled, neighbours' homes learned)."""
    u = dnp.zeros((n * side, side), chunks=(side, side), client=client)
    v = dnp.zeros_like(u)
    u[1:-1, 1:-1] = 1.0
    v[1:-1, 1:-1] = 1.0
    for _ in range(warm):
        step(dnp, u, v)
        u, v = v, u
    u.wait()
    return u, v


def measure(n: int, side: int, steps: int, backend: str, kw: dict) -> dict:
    client = dgvm.connect(n_workers=n, backend=backend, dashboard_address=None, **kw)
    try:
        u, v = grids(client, n, side)
        before = counters(client)
        t0 = time.time()
        walls, starts = [], []
        for _ in range(steps):
            s0 = time.time()
            starts.append(s0)
            step(dnp, u, v)
            u, v = v, u
            u.wait()
            walls.append(time.time() - s0)
        t1 = time.time()
        after = counters(client)
        time.sleep(0.5)  # the last operation events reach the scheduler
        events = [m for _, m in client.get_events(messages.OPERATIONS_TOPIC) if t0 <= m["start"] <= t1]
        per_worker = {}
        for w, (comm, ahead, gathered) in after.items():
            c0, a0, g0 = before.get(w, ({}, 0, 0))
            per_worker[w] = (comm.get("count", 0) - c0.get("count", 0), ahead - a0,
                             1e3 * (comm.get("seconds", 0) - c0.get("seconds", 0)) / steps,
                             1e3 * (comm.get("copy_seconds", 0) - c0.get("copy_seconds", 0)) / steps,
                             gathered - g0)
        runs, longest, gaps = [], [], []
        bounds = starts + [t1]
        stops = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            mine = [m for m in events if a <= m["start"] < b]
            if mine:
                runs.extend(m["stop"] - m["start"] for m in mine)
                longest.append(max(m["stop"] - m["start"] for m in mine))
                stops.append((min(m["start"] for m in mine), max(m["stop"] for m in mine)))
        gaps = [nxt[0] - prev[1] for prev, nxt in zip(stops[:-1], stops[1:])]
        bandwidth = sum(w.bandwidth for w in dgvm.workers(client=client)) / n
        return {"step": statistics.median(walls), "workers": per_worker, "bandwidth": bandwidth,
                "task": statistics.median(runs) if runs else float("nan"),
                "longest": statistics.median(longest) if longest else float("nan"),
                "gap": statistics.median(gaps) if gaps else float("nan")}
    finally:
        client.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--workers", default=None, help="device counts, e.g. 1,2,4 (default: 1,2,4 on cuda, 1,2 on cpu)")
    p.add_argument("--mib", type=float, default=None, help="MiB of each grid per device")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    from dgvm import backends

    backend = backends.resolve(args.backend)
    counts = [int(c) for c in (args.workers or ("1,2,4" if backend == "cuda" else "1,2")).split(",")]
    if backend == "cuda":
        from dgvm.backends.cuda import gpu_count

        found = gpu_count()
        counts = [c for c in counts if c <= found] or [found]
    side, nbytes, kw = band(backend, args.mib)
    print(f"backend {backend}; a {side} x {side} float64 band per device ({nbytes / 2**20:.0f} MiB), "
          f"{args.steps} steps after a warm-up")
    single = single_device(backend, side, args.steps)
    first = None
    for n in counts:
        r = measure(n, side, args.steps, backend, kw)
        floor = 2 * nbytes / r["bandwidth"]
        first = first or r["step"]
        print(f"\n{n} device(s): {1e3 * r['step']:.2f} ms per step (efficiency {first / r['step']:.0%}; "
              f"one-device peer {1e3 * single:.2f} ms, peer/dgvm {single / r['step']:.2f}x; "
              f"device floor {1e3 * floor:.2f} ms)")
        print(f"  tasks: median run {1e3 * r['task']:.2f} ms, longest per step {1e3 * r['longest']:.2f} ms, "
              f"gap between steps {1e3 * r['gap']:.2f} ms")
        for w, (pieces, ahead, wait, copy, gathered) in sorted(r["workers"].items()):
            print(f"  {w}: {pieces} pieces ({ahead} asked ahead), {wait:.2f} ms/step asking to having them, "
                  f"{copy:.2f} ms/step copying, {gathered} regions gathered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
