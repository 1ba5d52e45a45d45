"""Halo rows pushed to the worker that reads them next, on against off, in one cluster.

    python benchmarks/pushes.py [--backend auto|cuda|cpu] [--workers 2] [--per-gpu-gib G]
                                [--per-gpu-mib M] [--rounds 3] [--reps 5] [--workloads stencil,CG]

The stencil and CG of ``scaling.py`` (the same sizes: ``--per-gpu-gib``, by default what
the device holds) on one dgvm cluster of ``--workers`` workers, with
``dgvm.transfer.push-pieces`` on and off in turn (set on the workers and here between
runs: the cluster and its warm caches stay), ``--rounds`` times. Printed per run: the
milliseconds per iteration (median of ``--reps`` runs after a warm-up), and the pieces the
homes pushed and the tasks took meanwhile (a push no task took was sent for nothing). A
round's pair is run back to back, so the spread between rounds shows what a difference
within a pair is worth.
"""

from __future__ import annotations

import argparse
import sys

import dask

import dgvm
from dgvm.protocol import messages
from scaling import ITERS, WORKLOADS, default_per_gpu, dgvm_lib, shape_per_gpu  # benchmarks/scaling.py
from timing import median_time  # benchmarks/timing.py


def _set_push(on: bool, dask_worker=None) -> None:
    dask.config.set({"dgvm.transfer.push-pieces": on})


def _counts(client) -> tuple[int, int]:
    """(pieces pushed, pieces tasks took) over the cluster so far."""
    sent = client.run(lambda dask_worker: dask_worker.plugins[messages.STORE_PLUGIN].pushes.sent)
    taken = sum(s["pushed"] for s in dgvm.stats(client=client)["workers"].values())
    return sum(sent.values()), taken


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--per-gpu-gib", type=float, default=None)
    p.add_argument("--per-gpu-mib", type=float, default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--workloads", default="stencil,CG")
    args = p.parse_args(argv)
    from dgvm import backends

    backend = backends.resolve(args.backend)
    if args.per_gpu_gib is not None or args.per_gpu_mib is not None:
        per_gpu = int((args.per_gpu_gib or 0) * 2**30 + (args.per_gpu_mib or 0) * 2**20)
    else:
        per_gpu = default_per_gpu(backend)
    rows, cols = shape_per_gpu(per_gpu)
    n = args.workers
    print(f"backend {backend}, {n} workers, a {rows} x {cols} float64 band per worker "
          f"({per_gpu / 2**20:.0f} MiB) per array; dgvm.dispatch.peers: {dgvm.config.get('dispatch.peers')}")
    client = dgvm.connect(n_workers=n, backend=backend, dashboard_address=":0")
    lib = dgvm_lib(backend)
    try:
        for name in args.workloads.split(","):
            setup, run = WORKLOADS[name]
            state = setup(lib, n, rows, cols)
            times = {True: [], False: []}
            for r in range(args.rounds):
                for on in (True, False):
                    client.run(_set_push, on)
                    _set_push(on)
                    before = _counts(client)
                    t = median_time(lambda: lib.finish(run(lib, state)), args.reps) / ITERS[name]
                    sent, taken = (a - b for a, b in zip(_counts(client), before))
                    times[on].append(t)
                    print(f"{name:8} round {r + 1} pushed {'on ' if on else 'off'}: {t * 1e3:7.2f} ms per iteration;"
                          f" pieces pushed {sent}, taken {taken}")
            for on in (True, False):
                print(f"{name:8} pushed {'on ' if on else 'off'}: " + " / ".join(f"{t * 1e3:.2f}" for t in times[on]) + " ms")
            del state
            lib.release()
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
