"""How long calls wait after a worker process dies: from the kill to their ``ChunkLost``.

    python benchmarks/worker_loss.py [--workers 4] [--rounds 3]

On a local ``cpu`` cluster of worker processes (their nannies start a new one after each
kill), each round spreads an array over every worker, starts a launch that runs until the
kill on one of them, SIGKILLs that worker's process, and times from the kill:

- **removed**: the scheduler removing the worker;
- **launch in flight**: ``out.wait()`` of the launch running there;
- **read at the kill**: a read of the array started right after the kill;
- **read, sum, x + 1, launch, free**: each started once the worker was removed;
- **arena gone**: the worker's shared-memory arena unlinked from ``/dev/shm``.

Prints the median over ``--rounds`` of each, in seconds. Target (issue 23): every call
answers with ``ChunkLost`` a few seconds at most after the scheduler removed the worker.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import statistics
import threading
import time

import numpy as np
from numba import cuda

import dgvm
import dgvm.array as dnp

LIMIT = 120.0  # seconds: a call that takes longer is reported as a hang


@dgvm.kernel
def add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


@dgvm.kernel
def spin(n, out):
    i = cuda.grid(1)
    if i < out.size:
        s = 0.0
        for k in range(n[i]):
            s += math.sqrt(k)
        out[i] = s


def answer(call):
    """(seconds, what came back) of ``call()``, run in a thread; None seconds past LIMIT."""
    box = {}

    def run():
        try:
            box["out"] = call()
        except BaseException as e:  # noqa: BLE001
            box["out"] = e
        box["t"] = time.perf_counter()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(LIMIT)
    return box.get("t"), box.get("out")


def live_workers(client) -> list:
    return client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.workers))


def one_round(client, n_workers: int, chunk: int) -> dict:
    while len(live_workers(client)) < n_workers:  # the nanny's new worker, after a kill
        time.sleep(0.05)
    x = dnp.from_numpy(np.arange(float(n_workers * 2 * chunk)), chunks=chunk, placement="round_robin")
    out = dnp.zeros(x.shape, chunks=chunk, colocate=x)
    steps = dnp.zeros(x.shape, dtype=np.int64, chunks=chunk, colocate=x)
    dgvm.launch(add_one, x, out=out)
    dgvm.launch(spin, steps, out=out)  # both compiled everywhere
    out.wait()
    victim = x.alloc.home(1)
    steps[...] = np.repeat(np.array(x.alloc.homes()) == victim, chunk) * 10**15
    arena = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.shm_name,
                       workers=[victim])[victim]
    dgvm.launch(spin, steps, out=out)  # runs on the victim until it dies
    while not any("spin" in str(k) for k in client.processing(workers=[victim])[victim]):
        time.sleep(0.01)
    dnp.asnumpy(x[:chunk])  # warm
    in_flight, racing = {}, {}
    waiter = threading.Thread(target=lambda: in_flight.update(r=answer(out.wait)), daemon=True)
    waiter.start()
    pid = client.run(os.getpid, workers=[victim])[victim]
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    reader = threading.Thread(target=lambda: racing.update(r=answer(lambda: dnp.asnumpy(x))), daemon=True)
    reader.start()  # before the scheduler knows
    while victim in live_workers(client):
        time.sleep(0.005)
    times = {"removed": time.perf_counter() - t0}
    waiter.join(LIMIT)
    reader.join(LIMIT)
    calls = {
        "launch in flight": lambda: in_flight.get("r", (None, None)),
        "read at the kill": lambda: racing.get("r", (None, None)),
        "read": lambda: answer(lambda: dnp.asnumpy(x)),
        "sum": lambda: answer(lambda: float(x.sum())),
        "x + 1": lambda: answer(lambda: float((x + 1).sum())),
        "launch": lambda: answer(lambda: dgvm.launch(add_one, x, out=out) or out.wait()),
        "free": lambda: answer(lambda: [a.free() for a in (x, out, steps)] and None),
    }
    for name, call in calls.items():
        t, got = call()
        ok = isinstance(got, dgvm.ChunkLost) or (name == "free" and got is None)
        times[name] = (t - t0) if (t is not None and ok) else math.inf
    while os.path.exists(f"/dev/shm/{arena}") and time.perf_counter() - t0 < LIMIT:
        time.sleep(0.005)
    times["arena gone"] = time.perf_counter() - t0
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chunk-elems", type=int, default=2**16)
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    logging.getLogger("dgvm").setLevel(logging.ERROR)
    client = dgvm.connect(n_workers=args.workers, backend="cpu", processes=True,
                          device_memory="256MiB", dashboard_address=None)
    try:
        rounds = [one_round(client, args.workers, args.chunk_elems) for _ in range(args.rounds)]
    finally:
        client.close()
    print(f"seconds from SIGKILL, median of {args.rounds} rounds ({args.workers} worker processes); "
          "inf: no ChunkLost within the limit")
    for name in rounds[0]:
        print(f"  {name:<18} {statistics.median(r[name] for r in rounds):8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
