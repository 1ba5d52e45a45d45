"""How long a program waits after its scheduler dies and one starts at the same address.

    python benchmarks/scheduler_restart.py [--workers 3] [--rounds 3] [--chunks 32]

Starts ``dask scheduler --preload dgvm.scheduler`` on a fixed port and ``dgvm worker
--backend cpu --nworkers N`` (worker processes under nannies), makes three arrays of 8 MB
(``--chunks`` chunks each), then per round SIGKILLs the scheduler, starts a new one on the
same port and times from that start:

- **listening**: the new scheduler accepts connections (its start: Python, Dask, the preload);
- **workers**: the program's client reconnected and every worker registered again;
- **rebuilt**: the GVAT answers every allocation (``dgvm.table``);
- **read**: every array read back NumPy-equal.

Prints each round and the medians, in seconds. The rebuild ends 2 s after the last worker
with chunks registered (``dgvm.scheduler.rebuild.QUIET``).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

import dask
import numpy as np

import dgvm
import dgvm.array as dnp

ENV = {**os.environ, "DASK_DGVM__PROFILE_BYTES": "2MiB"}
LIMIT = 300.0  # seconds a step may take


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scheduler(port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--dashboard-address", ":0", "--preload", "dgvm.scheduler"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)


def until(check, t0: float) -> float:
    """Seconds from ``t0`` until ``check()`` is true (errors while the scheduler is away
    count as false)."""
    while time.monotonic() - t0 < LIMIT:
        try:
            if check():
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001
            pass
        time.sleep(0.05)
    raise TimeoutError(f"not within {LIMIT} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=32)
    args = parser.parse_args()
    port = free_port()
    sched = scheduler(port)
    workers = subprocess.Popen(
        [sys.executable, "-m", "dgvm", "worker", f"tcp://127.0.0.1:{port}", "--host", "127.0.0.1",
         "--nworkers", str(args.workers), "--backend", "cpu", "--device-memory", "64MiB"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    rows = []
    try:
        with dask.config.set({"dgvm.connect-timeout": f"{LIMIT}s"}):
            client = dgvm.connect(f"tcp://127.0.0.1:{port}")
        until(lambda: len(dgvm.workers(client=client)) == args.workers, time.monotonic())
        hosts = [np.random.default_rng(i).random(1_000_000) for i in range(3)]
        arrays = [dnp.from_numpy(h, chunks=-(-1_000_000 // args.chunks), client=client) for h in hosts]
        for r in range(args.rounds):
            os.killpg(sched.pid, signal.SIGKILL)
            sched.wait()
            t0 = time.monotonic()
            sched = scheduler(port)
            listening = until(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True, t0)
            back = until(lambda: client.status == "running"
                         and len(client.scheduler_info()["workers"]) == args.workers, t0)
            rebuilt = until(lambda: len(dgvm.table(client=client)) == len(arrays), t0)
            equal = all(np.array_equal(dnp.asnumpy(a), h) for a, h in zip(arrays, hosts))
            read = time.monotonic() - t0
            rows.append((listening, back, rebuilt, read))
            print(f"round {r}: listening {listening:.2f} s, workers {back:.2f} s, rebuilt {rebuilt:.2f} s, read {read:.2f} s, "
                  f"NumPy-equal {equal}", flush=True)
        medians = [statistics.median(row[i] for row in rows) for i in range(4)]
        print("median: listening {:.2f} s, workers {:.2f} s, rebuilt {:.2f} s, read {:.2f} s".format(*medians))
        client.close()
    finally:
        for p in (workers, sched):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
