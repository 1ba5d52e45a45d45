"""Where the time of elementwise chains run back to back goes, task by task, on each worker.

    python benchmarks/task_timeline.py [--backend auto|cuda|cpu] [--n 40000] [--k 16]
                                       [--threads 1] [--alive 2] [--address ADDR]
                                       [--scheduler-process]

Runs ``y = ((2x + 1) x - 3) / (x + 2)`` ``--k`` times, each ``persist()``-ed before the one
before has finished (``--alive`` results kept), and prints the time per chain, the CPU this
process spent per chain (on a ``LocalCluster`` the scheduler runs in it), and the medians
over each worker's tasks, from the worker's own log and clock, of:

- wait: from the task's arrival to its start (it waited for a thread or its dependencies)
- to fn: from Dask's "executing" to the task function's first line
- launch: in the function, until the device wait at its end (the chunks' kernels queued)
- device: that wait, for the device to finish the queued work; none (0) in a task that
  left its work running for the one ready behind it (``dgvm.dispatch.device-wait``)
- to done: from the function's return to Dask's "memory"
- idle: from one task's "memory" to the next one's "executing" on that worker

On cuda it adds, from CUDA events around each task's work, how much of the run the device
spent on the tasks' work (a task's share counts from when the device reached its work),
how long it sat idle between tasks, and its longest idle gaps. Then the stalls of the
event loops every task goes through: each time the scheduler's loop or this process's
(the client's) ran a 1 ms timer more than 10 ms late, and the scheduler's garbage
collections over 5 ms. A stall of either loop holds up the next task on every worker, so
a long run (``--k 200``) shows where the device's longest gaps come from.

One pass over x moves ``2 * 8 * n * n / workers`` bytes per worker: at the bandwidth the
workers measured that is the device floor printed beside. ``--address`` connects to a
running cluster (``dgvm scheduler`` and ``dgvm worker``: the scheduler then has its own
process).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time

import cloudpickle

import dgvm
import dgvm.array as dnp
from array_ops import chains_back_to_back  # benchmarks/array_ops.py (the script's folder is on sys.path)

# Functions of this module run on the workers (client.run): shipped whole.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _instrument(dask_worker, tasks: int):
    """Note when each blockwise task's function starts and returns and when it waits
    for the device or leaves its work running (wrapping the module function the tasks
    name, the backend's wait and its record of work left running), and keep the worker's
    log of task states long enough for ``tasks`` tasks."""
    import collections
    import time as clock

    from distributed import get_worker

    import dgvm.array._engine.blockwise_tasks as blockwise_tasks

    notes = dask_worker._dgvm_timeline = {}
    state = dask_worker.state
    # Dask keeps its last 1,000 entries, about 150 tasks' (each task logs several).
    state.log = collections.deque(state.log, maxlen=max(state.log.maxlen or 0, 20 * tasks))
    run = blockwise_tasks.blockwise_here
    backend = dask_worker.extensions["dgvm"].backend
    wait, leave = backend.synchronize, backend.queued.leave

    # On cuda, events around each task's work on the stream: when the device reached it
    # and when it finished it, in ms after ``start`` (read out by ``_log``).
    mark = None
    if backend.name == "cuda":
        import cupy

        start = cupy.cuda.Event()
        start.record()

        def record():
            e = cupy.cuda.Event()
            e.record()
            return e

        mark = record

    def timed_run(*args):
        note = notes[get_worker().get_current_task()] = {"fn": clock.time()}
        if mark is not None:
            note["events"] = (start, mark())
        try:
            return run(*args)
        finally:
            note["return"] = clock.time()
            if mark is not None:
                note["events"] += (mark(),)

    def timed_wait():
        t = clock.time()
        wait()
        try:
            note = notes.get(get_worker().get_current_task())
        except Exception:  # noqa: BLE001  (not in a task)
            note = None
        if note is not None:
            note["wait"], note["waited"] = t, clock.time()

    def timed_leave(what):
        leave(what)
        note = notes.get(get_worker().get_current_task())
        if note is not None:
            note["wait"] = note["waited"] = clock.time()
            note["left"] = True

    blockwise_tasks.blockwise_here = timed_run
    backend.synchronize = timed_wait
    backend.queued.leave = timed_leave


def _log(dask_worker, prefix: str):
    """Per task key: arrival, executing and memory times from the worker's state log,
    with the notes of ``_instrument``."""
    out = {}
    for entry in list(dask_worker.state.log):
        key = entry[0]
        if not (isinstance(key, str) and key.startswith(prefix)):
            continue
        row = out.setdefault(key, {})
        if entry[1] == "compute-task":
            row.setdefault("arrived", entry[-1])
        elif len(entry) >= 7 and entry[2] in ("executing", "memory"):
            row[entry[2]] = entry[-1]
    for key, note in getattr(dask_worker, "_dgvm_timeline", {}).items():
        if key in out:
            note = dict(note)
            events = note.pop("events", None)
            if events is not None and len(events) == 3:  # (not when still running)
                import cupy

                events[-1].synchronize()
                start, reached, done = events
                note["device reached"] = cupy.cuda.get_elapsed_time(start, reached) / 1e3
                note["device done"] = cupy.cuda.get_elapsed_time(start, done) / 1e3
            out[key].update(note)
    return out


def device_busy(rows) -> str:
    """On cuda: how much of the worker's run the device spent on the tasks' work, and its
    idle time between tasks (from the events of ``_instrument``)."""
    spans = sorted((r["device reached"], r["device done"]) for r in rows if "device done" in r)
    if len(spans) < 2:
        return ""
    merged = [list(spans[0])]  # with threads > 1 the tasks' work interleaves
    for lo, hi in spans[1:]:
        if lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    span = merged[-1][1] - merged[0][0]
    busy = sum(hi - lo for lo, hi in merged)
    gaps = [b[0] - a[1] for a, b in zip(merged, merged[1:])] or [0.0]
    longest = ", ".join(f"{1e3 * g:.1f}" for g in sorted(gaps)[-3:][::-1])
    return (f"{'':>24} device busy {busy / span:.0%} of its {1e3 * span:.1f} ms; idle between tasks "
            f"{1e3 * sum(gaps):.1f} ms in all, median {1e3 * statistics.median(gaps):.2f} ms, longest {longest} ms")


def _watch_stalls(dask_scheduler=None, loop=None):
    """Note, until ``_stalls`` reads them, each time this process's event loop runs a 1 ms
    timer more than 10 ms late, and (on the scheduler) each garbage collection over 5 ms."""
    import gc
    import time as clock

    loop = loop or dask_scheduler.loop
    notes = {"late": [], "gc": [], "on": True}

    def tick(due):
        late = clock.perf_counter() - due
        if late > 0.010:
            notes["late"].append(late)
        if notes["on"]:
            loop.call_later(0.001, tick, clock.perf_counter() + 0.001)

    def collected(phase, info):
        if phase == "start":
            notes["t"] = clock.perf_counter()
        elif clock.perf_counter() - notes.get("t", clock.perf_counter()) > 0.005:
            notes["gc"].append((info["generation"], clock.perf_counter() - notes["t"]))

    if dask_scheduler is not None:
        gc.callbacks.append(collected)
        notes["unhook"] = lambda: gc.callbacks.remove(collected)
    loop.add_callback(tick, clock.perf_counter())
    (dask_scheduler or sys.modules[__name__]).__dict__["_dgvm_stalls"] = notes


def _stalls(dask_scheduler=None) -> str:
    notes = (dask_scheduler or sys.modules[__name__]).__dict__.pop("_dgvm_stalls")
    notes["on"] = False
    notes.get("unhook", lambda: None)()
    late = sorted(notes["late"], reverse=True)
    text = f"{len(late)} loop stalls over 10 ms" + (
        ": " + ", ".join(f"{1e3 * t:.0f}" for t in late[:6]) + (" ..." if len(late) > 6 else "") + " ms"
        if late else "")
    if dask_scheduler is not None:
        text += "; collections over 5 ms: " + (", ".join(
            f"generation {g} {1e3 * t:.0f} ms" for g, t in notes["gc"]) or "none")
    return text


STEPS = {
    "wait": ("arrived", "executing"),
    "to fn": ("executing", "fn"),
    "launch": ("fn", "wait"),
    "device": ("wait", "waited"),
    "to done": ("return", "memory"),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--n", type=int, default=None, help="default: 40000 on cuda, 2000 on cpu")
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--scheduler-process", action="store_true",
                   help="the LocalCluster's scheduler in a process of its own (not this one's event loop)")
    p.add_argument("--alive", type=int, default=2, help="results kept alive in the loop")
    p.add_argument("--address", default=None)
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    from dgvm import backends

    if args.address:
        client = dgvm.connect(args.address)
        backend = dgvm.workers(client=client)[0].backend
    else:
        backend = backends.resolve(args.backend)
        kw = {} if backend == "cuda" else {"device_memory": "2GiB"}
        client = dgvm.connect(n_workers=2, backend=backend, dashboard_address=None,
                              threads_per_worker=args.threads, scheduler_process=args.scheduler_process, **kw)
    try:
        n = args.n or (40000 if backend == "cuda" else 2000)
        ws = dgvm.workers(client=client)
        bw = sum(w.bandwidth for w in ws)
        x = dnp.random.random((n, n), chunks=-(-n // 4))
        x.wait()

        for _ in range(3):  # compiles, and fills the pool of released allocations
            chains_back_to_back(x, 8, args.alive)
        client.run(_instrument, tasks=2 * args.k)
        client.run_on_scheduler(_watch_stalls)
        _watch_stalls(loop=client.loop)
        cpu, t0 = time.process_time(), time.time()
        chains_back_to_back(x, args.k, args.alive)
        wall, cpu = time.time() - t0, time.process_time() - cpu
        stalls = {"scheduler": client.run_on_scheduler(_stalls), "this process": _stalls()}
        floor = 2 * 8 * n * n / bw
        where = "an address" if args.address else "its own process" if args.scheduler_process else "this process"
        print(f"backend {backend}, {len(ws)} workers of {list(client.nthreads().values())} thread(s), "
              f"the scheduler in {where}, "
              f"x {n}x{n} float64 in 4x4 blocks, {args.k} chains, {args.alive} alive, "
              f"this process's thread switch interval {1e6 * sys.getswitchinterval():.0f} us")
        print(f"per chain {1e3 * wall / args.k:.2f} ms (the device floor {1e3 * floor:.2f} ms at "
              f"{bw / 1e9:.0f} GB/s: {floor * args.k / wall:.0%}); this process's CPU per chain "
              f"{1e3 * cpu / args.k:.2f} ms")
        print(f"{'worker':>24} {'tasks':>5} {'left':>5} " + " ".join(f"{s:>8}" for s in [*STEPS, "idle"])
              + "  (ms, medians; left: tasks that did not wait for the device)")
        for addr, log in client.run(_log, prefix="dgvm-fused").items():
            rows = sorted((r for r in log.values() if "fn" in r and "memory" in r and r.get("executing", 0) >= t0),
                          key=lambda r: r["executing"])
            cells = [statistics.median(r[b] - r[a] for r in rows if a in r and b in r) for a, b in STEPS.values()]
            idle = [b["executing"] - a["memory"] for a, b in zip(rows, rows[1:])]
            cells.append(statistics.median(idle) if idle else float("nan"))
            left = sum(1 for r in rows if r.get("left"))
            print(f"{addr:>24} {len(rows):>5} {left:>5} " + " ".join(f"{1e3 * c:8.2f}" for c in cells))
            busy = device_busy(rows)
            if busy:
                print(busy)
        for who, text in stalls.items():
            print(f"{who:>24} {text}")
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
