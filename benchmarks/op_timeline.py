"""Where the fixed time of one dgvm.array operation goes, hop by hop.

    python benchmarks/op_timeline.py [--backend auto|cuda|cpu] [--op add|mean|sum]
                                     [--shape 64,64] [--blocks 2,1] [--workers 2] [--reps 300]

Runs one operation on x (``--shape``, cut into ``--blocks`` blocks per axis) ``--reps``
times, each waited for: ``add`` is ``(x + 1).wait()``, ``mean`` ``x.mean(axis=0).wait()``,
``sum`` ``float(x.sum())``. It wraps, on the direct plane only, the client's submit and
send of each task and its end (``DirectPlane.submit``, ``Channel.send``,
``DirectTask._end``), and in the workers' processes the task's arrival, its body on its
thread and the write of its answer (``DirectTasks._start``, ``_call``, the connection's
``write``). All processes share this host's clock. Printed, medians in ms:

- the operation, wall time in the program;
- in the program: building the operation's array, from ``wait()`` to the first submit
  (``add`` only; a reduction is submitted as it is called), the submit call;
- on the client's event loop: from the submit to the send;
- from the send to the worker's arrival (both event loops, the wire);
- on the worker: arrival to body start (a hop to a thread), the body, body end to the
  answer's write, the write;
- from the write to the client's end of the task, and from the last task's end to the
  program having its value.

A diagnostic, not a target: the wrapped functions are internals. See ``overhead.py`` for
the operations beside Dask's task path and the device floor.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import statistics
import time

import dgvm
import dgvm.array as dnp
from timing import direct_plane_backend


def _install(dask_worker):
    """Record per task key, on the worker's clock: arrival, body start and end, answer
    write start and end (``dask_worker.dgvm_op_timeline``; the wrappers once per process)."""
    import time as clock

    from dgvm.protocol import messages
    from dgvm.worker import direct

    dask_worker.dgvm_op_timeline = {}
    cls = direct.DirectTasks
    plugin = dask_worker.plugins[messages.STORE_PLUGIN]
    if not getattr(cls, "_op_timeline", False):
        cls._op_timeline = True
        start, call = cls._start, cls._call

        def timed_start(self, msg, answer):
            self.worker.dgvm_op_timeline.setdefault(msg["key"], {})["arrive"] = clock.time()
            return start(self, msg, answer)

        def timed_call(self, key, *args):
            times = self.worker.dgvm_op_timeline.setdefault(key, {})
            times["body0"] = clock.time()
            try:
                return call(self, key, *args)
            finally:
                times["body1"] = clock.time()

        cls._start, cls._call = timed_start, timed_call
    serve = plugin.direct.serve

    async def timed_serve(comm, client=None):
        write = comm.write

        async def timed_write(msg, *args, **kwargs):
            t0 = clock.time()
            out = await write(msg, *args, **kwargs)
            for m in msg if isinstance(msg, list) else ():
                if isinstance(m, dict) and "key" in m:
                    times = dask_worker.dgvm_op_timeline.setdefault(m["key"], {})
                    times["write0"], times["write1"] = t0, clock.time()
            return out

        comm.write = timed_write
        return await serve(comm, client)

    dask_worker.handlers[messages.DIRECT] = timed_serve  # (connections opened from now on)


def measure(op: str, shape, blocks, workers: int, reps: int, backend: str) -> dict:
    from dgvm.client import direct as plane

    client = dgvm.connect(n_workers=workers, backend=backend, dashboard_address=None)
    client.run(_install)
    log: dict = collections.defaultdict(dict)
    submit, send, end = plane.DirectPlane.submit, plane.Channel.send, plane.DirectTask._end

    def timed_submit(self, *args, **kwargs):
        t0 = time.time()
        tasks = submit(self, *args, **kwargs)
        for t in tasks:
            log[t.key].update(sub0=t0, sub1=time.time())
        return tasks

    def timed_send(self, task, msg):
        log[task.key]["send"] = time.time()
        return send(self, task, msg)

    def timed_end(self, *args, **kwargs):
        if self.status == "pending":  # (a second end changes nothing)
            log[self.key]["end"] = time.time()
        return end(self, *args, **kwargs)

    chunks = tuple(-(-s // b) for s, b in zip(shape, blocks))
    try:
        return _measured(client, log, (timed_submit, timed_send, timed_end), (submit, send, end), op,
                         dnp.ones(shape, chunks=chunks), reps)
    finally:
        client.close()


def _measured(client, log, timed, plain, op, x, reps) -> dict:
    from dgvm.client import direct as plane

    x.wait()

    def run():  # -> (when the operation's array was built, when its value was had)
        if op == "add":
            y = x + 1
            built = time.time()
            y.wait()
            return built
        if op == "mean":
            x.mean(axis=0).wait()
        else:
            float(x.sum())
        return None

    try:
        for _ in range(20):
            run()
        plane.DirectPlane.submit, plane.Channel.send, plane.DirectTask._end = timed
        rows = []
        for _ in range(reps):
            t0 = time.time()
            built = run()
            rows.append((t0, built, time.time()))
    finally:
        plane.DirectPlane.submit, plane.Channel.send, plane.DirectTask._end = plain
    on_workers = {}
    for times in client.run(lambda dask_worker: dask_worker.dgvm_op_timeline).values():
        on_workers.update(times)
    parts = collections.defaultdict(list)
    kept = 0
    for key, t in log.items():
        t.update(on_workers.get(key, {}))
        if not {"sub0", "send", "end", "arrive", "body0", "body1", "write0", "write1"} <= t.keys():
            continue
        kept += 1
        parts["submit (program)"].append(t["sub1"] - t["sub0"])
        parts["submit -> send (client's loop)"].append(t["send"] - t["sub1"])
        parts["send -> arrival on the worker"].append(t["arrive"] - t["send"])
        parts["arrival -> body start"].append(t["body0"] - t["arrive"])
        parts["body"].append(t["body1"] - t["body0"])
        parts["body end -> answer written"].append(t["write0"] - t["body1"])
        parts["answer write"].append(t["write1"] - t["write0"])
        parts["written -> task ended on the client"].append(t["end"] - t["write1"])
    submits = sorted((t["sub0"], t.get("end", 0.0)) for t in log.values() if "sub0" in t)
    for t0, built, t1 in rows:
        parts["operation"].append(t1 - t0)
        if built is not None:
            parts["building its array (program)"].append(built - t0)
        since = built if built is not None else t0
        i = bisect.bisect_left(submits, (since, 0.0))
        ours = [s for s in submits[i:] if s[0] < t1]
        if ours:
            if built is not None:
                parts["wait() -> first submit"].append(ours[0][0] - since)
            parts["last task's end -> value in the program"].append(t1 - max(e for _, e in ours))
    if kept < len(log):
        print(f"({len(log) - kept} of {len(log)} tasks missed a hop and are left out)")
    return {k: 1e3 * statistics.median(v) for k, v in parts.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--op", default="add", choices=("add", "mean", "sum"))
    p.add_argument("--shape", default="64,64")
    p.add_argument("--blocks", default="2,1", help="blocks per axis")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--reps", type=int, default=300)
    args = p.parse_args(argv)
    backend = direct_plane_backend("op_timeline.py", args.backend)
    shape = tuple(int(s) for s in args.shape.split(","))
    blocks = tuple(int(b) for b in args.blocks.split(","))
    r = measure(args.op, shape, blocks, args.workers, args.reps, backend)
    print(f"backend {backend}, {args.workers} workers, op {args.op} on x {shape} float64 in {blocks} blocks; "
          f"median of {args.reps}, ms")
    for name, ms in r.items():
        print(f"  {name:42s} {ms:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
