"""How fast a chunk migrates between two workers: dgvm beside Dask's own transfer.

    python benchmarks/migration.py [--backend auto|cuda|cpu] [--max-mib 1024] [--reps 5]
                                   [--many 16x64,8x512]

On a local cluster of 2 workers (one per GPU on ``cuda``; 2 processes on ``cpu``), for
chunks of 1 MiB to 1 GiB, prints in one run:

- **link** (dgvm): the copy itself as the receiving worker timed it (CUDA IPC peer copy,
  device to device, timed by CUDA events on ``cuda``; from the holder's shared memory,
  by the wall clock, on ``cpu``);
- **fetch** (dgvm): the receiving worker's whole fetch, by the wall clock: ask the holder
  for the chunk (one request), allocate, open the IPC handle (kept open for the next
  fetch from that buffer) or arena, copy;
- **migrate** (dgvm): ``buf.migrate([0], other)`` end to end from this process: the GVAT's
  requests to both workers, the copy, the old home freeing its copy, the client's map;
- **Dask**: the same bytes (a CuPy or NumPy array held by one worker) moved by Dask to a
  task on the other worker (TCP comm, or UCX where dask-cuda set it up);
- **hardware**: the measured device-to-device copy between the two GPUs in this process
  (``cudaMemcpyPeer``), or a host memory copy on ``cpu``.

Then, for an allocation of several chunks (``--many``: COUNTxMIB each), the same dgvm
figures for moving all its chunks in one ``buf.migrate`` call (one request to the new
home, one to the old, the copies in flight together).

Each figure is the median of ``--reps`` moves, alternating directions. Targets (from the
kernels-and-migration issue): on cuda, chunks of 64 MiB and more move at >= 90 % of the
hardware figure and >= 20x Dask; on cpu, >= 10x Dask.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time

import numpy as np

from dgvm.client.progress import track

MiB = 2**20


def hardware_bandwidth(backend: str, nbytes: int) -> tuple[str, float]:
    """(what was measured, bytes/s) of the raw copy the transfer path stands on."""
    if backend == "cuda":
        import cupy

        rt = cupy.cuda.runtime
        for here, peer in ((0, 1), (1, 0)):  # as the workers' CUDA IPC copies have it
            with cupy.cuda.Device(here):
                if rt.deviceCanAccessPeer(here, peer):
                    try:
                        rt.deviceEnablePeerAccess(peer)
                    except cupy.cuda.runtime.CUDARuntimeError:
                        pass  # already enabled
        with cupy.cuda.Device(0):
            src = cupy.ones(nbytes, dtype=np.uint8)
        with cupy.cuda.Device(1):
            dst = cupy.empty(nbytes, dtype=np.uint8)
        best = float("inf")
        for _ in range(6):  # the first one warms up
            cupy.cuda.runtime.deviceSynchronize()
            t0 = time.perf_counter()
            cupy.cuda.runtime.memcpyPeer(dst.data.ptr, 1, src.data.ptr, 0, nbytes)
            with cupy.cuda.Device(1):
                cupy.cuda.runtime.deviceSynchronize()
            best = min(best, time.perf_counter() - t0)
        return "GPU0->GPU1 cudaMemcpyPeer", nbytes / best
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = min(_timed(np.copyto, dst, src) for _ in range(5))
    return "host memcpy (np.copyto)", nbytes / best


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def _make(nbytes: int, backend: str):
    if backend == "cuda":
        import cupy

        return cupy.ones(nbytes, dtype=np.uint8)
    return np.ones(nbytes, dtype=np.uint8)


def _size_of(a) -> int:
    return int(a.nbytes)


def dask_transfer(client, a: str, b: str, nbytes: int, backend: str, reps: int) -> float:
    """Median seconds for Dask to move an array of ``nbytes`` from worker ``a`` to a task on
    worker ``b`` (the array is made on ``a`` first, untimed)."""
    from distributed import wait

    times = []
    for r in track(range(reps), f"Dask {nbytes >> 20} MiB", stream=sys.stderr, transient=True):
        src, dst = (a, b) if r % 2 == 0 else (b, a)
        fut = client.submit(_make, nbytes, backend, workers=[src], pure=False)
        wait(fut)
        t0 = time.perf_counter()
        client.submit(_size_of, fut, workers=[dst], allow_other_workers=False, pure=False).result()
        times.append(time.perf_counter() - t0)
        del fut
    return statistics.median(times)


def dgvm_migrate(buf, a: str, b: str, reps: int, count: int = 1) -> tuple[float, float, float]:
    """Median seconds of the copy, of the receiving worker's fetch, and of ``buf.migrate``
    end to end (chunks ``0..count-1`` in one call)."""
    import dgvm

    def totals(dst):
        paths = dgvm.stats()["workers"][dst]["paths"].values()
        return sum(p["copy_seconds"] for p in paths), sum(p["seconds"] for p in paths)

    copies, fetches, ends = [], [], []
    for r in track(range(reps), f"dgvm {buf.nbytes >> 20} MiB", stream=sys.stderr, transient=True):
        dst = b if buf.home(0) == a else a
        c0, f0 = totals(dst)
        t0 = time.perf_counter()
        assert buf.migrate(list(range(count)), dst) == list(range(count))
        ends.append(time.perf_counter() - t0)
        c1, f1 = totals(dst)
        copies.append(c1 - c0)
        fetches.append(f1 - f0)
    return statistics.median(copies), statistics.median(fetches), statistics.median(ends)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--max-mib", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--many", default="16x64,8x512",
                   help="allocations of several chunks moved in one call: COUNTxMIB,... ('' for none)")
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.WARNING)

    import dgvm
    from dgvm import backends

    backend = backends.resolve(args.backend)
    sizes = [s for s in (1, 4, 16, 64, 256, 1024) if s <= args.max_mib]
    many = [tuple(int(v) for v in m.split("x")) for m in args.many.split(",") if m]
    many = [(k, s) for k, s in many if s <= args.max_mib]
    memory = f"{max([3 * max(sizes)] + [2 * k * s for k, s in many]) + 256}MiB"
    client = dgvm.connect(n_workers=2, backend=backend, device_memory=memory, dashboard_address=None)
    try:
        a, b = sorted(w.address for w in dgvm.workers())
        devices = ", ".join(f"{w.device} {w.name}" for w in dgvm.workers())
        hw_what, hw = hardware_bandwidth(backend, max(sizes) * MiB)
        print(f"backend {backend}: workers {devices}")
        print(f"hardware: {hw_what} = {hw / 1e9:.1f} GB/s")
        cols = ("link", "fetch", "migrate", "Dask")
        print(f"{'chunk':>9}" + "".join(f"{c:>13}" for c in cols) + "   (MB/s)"
              + "".join(f"{c + '/hw':>12}" for c in cols[:3])
              + "".join(f"{c + '/Dask':>14}" for c in cols[:3]))
        for s in sizes:
            n = s * MiB
            buf = dgvm.malloc(n, chunk_bytes=n)
            try:
                if buf.home(0) != a:
                    buf.migrate([0], a)
                times = dgvm_migrate(buf, a, b, args.reps)
            finally:
                buf.free()
            dask_s = dask_transfer(client, a, b, n, backend, args.reps)
            print(
                f"{s:>5} MiB" + "".join(f"{n / t / 1e6:>13.0f}" for t in (*times, dask_s)) + " " * 9
                + "".join(f"{n / t / hw:>12.0%}" for t in times)
                + "".join(f"{dask_s / t:>13.1f}x" for t in times),
                flush=True,
            )
        if many:
            print(f"{'chunks':>13}" + "".join(f"{c:>13}" for c in cols[:3]) + "   (MB/s)"
                  + "".join(f"{c + '/hw':>12}" for c in cols[:3]) + "   (all chunks in one call)")
        for k, s in many:
            n = s * MiB
            buf = dgvm.malloc(k * n, chunk_bytes=n)
            try:
                if set(buf.homes()) != {a}:
                    buf.migrate(list(range(k)), a)
                times = dgvm_migrate(buf, a, b, args.reps, k)
            finally:
                buf.free()
            print(f"{f'{k}x{s} MiB':>13}" + "".join(f"{k * n / t / 1e6:>13.0f}" for t in times) + " " * 9
                  + "".join(f"{k * n / t / hw:>12.0%}" for t in times), flush=True)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
