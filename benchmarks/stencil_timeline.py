"""Where the time of stencil steps sent back to back goes, on each worker's own clock.

    python benchmarks/stencil_timeline.py [--backend auto|cuda|cpu] [--workers 1,2]
                                          [--mib M] [--steps 30]

The 5-point Jacobi step of ``halo.py`` (``v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + ...)``, then
``u, v = v, u``) on one square band of ``--mib`` MiB per worker (default on cuda 1024, on
cpu 8), ``--steps`` steps sent without waiting (as ``scaling.py`` sends them), then waited
for. Unlike ``halo.py``, which waits for each step, this shows a chain of steps as it
runs: each step on a worker needs its neighbours' rows of the step before.

For the direct plane only (``dgvm.dispatch.plane: direct``; ``dgvm.dispatch.peers`` as
configured), it wraps, in the workers' processes for the timed steps, the task body on its
thread (``DirectTasks._call``), the task's coroutine from arrival to answer
(``DirectTasks._run``), the reads of neighbours' rows (``Access._read_piece``) and the
device wait at a task's end (``tasks.finish_on_device``), and in this process the send of
each task (``Channel.send``). Printed per worker count, medians over the steps' tasks:

- ms per step;
- body: the task body's time on its thread, of it the waits for neighbours' rows
  (from asking, or from taking the answer of a request sent ahead, to having them) and
  the device wait at its end;
- sent -> body start: from this process handing the task to its connection to its body
  starting on the worker's thread; arrival -> body start: the part of it on the worker
  (waiting for the tasks it follows, and for a thread);
- body end -> answer: the task's reports and answer;
- step gap: from the last body end of one step (any worker) to the first body start of
  the next.

A diagnostic, not a target: the wrapped functions are internals, and the figures say
which part of a step to shorten.
"""

from __future__ import annotations

import argparse
import statistics
import time

import dgvm
import dgvm.array as dnp

from halo import band, grids, step  # benchmarks/halo.py
from timing import direct_plane_backend


def _install(dask_worker):
    """Wrap the worker's task internals to record (kind, task key, start, stop) in
    ``dask_worker.dgvm_timeline`` (once per process; a new list each call)."""
    import time as clock

    from dgvm.worker import access, direct, tasks

    dask_worker.dgvm_timeline = []
    cls, acc = direct.DirectTasks, access.Access
    if getattr(cls, "_timeline", False):
        return
    cls._timeline = True
    call, run, read_piece, finish = cls._call, cls._run, acc._read_piece, tasks.finish_on_device

    def record(worker, kind, key, t0):
        log = getattr(worker, "dgvm_timeline", None)
        if log is not None:
            log.append((kind, key, t0, clock.time()))

    def timed_call(self, key, *args):
        t0 = clock.time()
        try:
            return call(self, key, *args)
        finally:
            record(self.worker, "body", key, t0)

    async def timed_run(self, key, *args):
        t0 = clock.time()
        try:
            return await run(self, key, *args)
        finally:
            record(self.worker, "run", key, t0)

    def timed_piece(self, *args):
        t0 = clock.time()
        try:
            return read_piece(self, *args)
        finally:
            record(self.worker, "piece", tasks.current_key(self), t0)

    def timed_finish(access_, *args, **kwargs):
        t0 = clock.time()
        try:
            return finish(access_, *args, **kwargs)
        finally:
            record(access_.worker, "device", tasks.current_key(access_), t0)

    cls._call, cls._run, acc._read_piece, tasks.finish_on_device = timed_call, timed_run, timed_piece, timed_finish


def _median_ms(values) -> float:
    return 1e3 * statistics.median(values) if values else float("nan")


def measure(n: int, side: int, steps: int, backend: str, kw: dict) -> dict:
    from dgvm.client import direct as plane

    client = dgvm.connect(n_workers=n, backend=backend, dashboard_address=None, **kw)
    sent: dict[str, float] = {}
    send = plane.Channel.send

    def timed_send(self, task, msg):
        sent[task.key] = time.time()
        return send(self, task, msg)

    try:
        u, v = grids(client, n, side, warm=5)
        client.run(_install)
        plane.Channel.send = timed_send
        t0 = time.time()
        for _ in range(steps):
            step(dnp, u, v)
            u, v = v, u
        u.wait()
        per_step = (time.time() - t0) / steps
        plane.Channel.send = send
        logs = client.run(lambda dask_worker: dask_worker.dgvm_timeline)
    finally:
        plane.Channel.send = send
        client.close()
    tasks: dict[str, dict] = {}
    for log in logs.values():
        for kind, key, a, b in log:
            if key is not None and "setitem" in key:
                tasks.setdefault(key, {}).setdefault(kind, []).append((a, b))
    ran = {k: t for k, t in tasks.items() if "body" in t and "run" in t}
    order = [k for k in sorted(sent, key=sent.get) if k in ran]
    steps_of = [order[i:i + n] for i in range(0, len(order), n)]  # a step's n tasks are sent together
    gaps = [min(ran[k]["body"][0][0] for k in b) - max(ran[k]["body"][0][1] for k in a)
            for a, b in zip(steps_of[:-1], steps_of[1:])]
    spans = lambda t, kind: sum(b - a for a, b in t.get(kind, []))  # noqa: E731
    return {
        "step": per_step,
        "body": _median_ms([t["body"][0][1] - t["body"][0][0] for t in ran.values()]),
        "piece": _median_ms([spans(t, "piece") for t in ran.values()]),
        "device": _median_ms([spans(t, "device") for t in ran.values()]),
        "sent": _median_ms([ran[k]["body"][0][0] - sent[k] for k in order]),
        "arrival": _median_ms([t["body"][0][0] - t["run"][0][0] for t in ran.values()]),
        "answer": _median_ms([t["run"][0][1] - t["body"][0][1] for t in ran.values()]),
        "gap": _median_ms(gaps),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--workers", default="1,2", help="worker (device) counts, e.g. 1,2")
    p.add_argument("--mib", type=float, default=None, help="MiB of each grid per worker")
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv)
    backend = direct_plane_backend("stencil_timeline.py", args.backend)
    from dgvm import config
    side, nbytes, kw = band(backend, args.mib)
    print(f"backend {backend}; a {side} x {side} float64 band per worker ({nbytes / 2**20:.0f} MiB), "
          f"{args.steps} steps sent back to back; dgvm.dispatch.peers: {config.get('dispatch.peers')}")
    for n in (int(c) for c in args.workers.split(",")):
        r = measure(n, side, args.steps, backend, kw)
        print(f"\n{n} worker(s): {1e3 * r['step']:.2f} ms per step")
        print(f"  body {r['body']:.2f} ms (waiting for neighbours' rows {r['piece']:.2f}, "
              f"for the device at its end {r['device']:.2f}); sent -> body start {r['sent']:.2f} "
              f"(arrival -> body start {r['arrival']:.2f}); body end -> answer {r['answer']:.2f}; "
              f"step gap {r['gap']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
