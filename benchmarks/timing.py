"""Timing shared by the benchmarks: the median of repeated runs after a warm-up, and the
end of a peer's GPU work."""

from __future__ import annotations

import statistics
import sys
import time

import cloudpickle

# Functions of this module run on the workers (client.run): shipped whole, so the workers
# need not find this folder on their path.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _synchronize_gpu():
    import cupy

    cupy.cuda.Device().synchronize()


def finish_device_work(client, backend: str) -> None:
    """A Dask task that launches CuPy kernels ends before the GPU does: the clock of a
    dask.array run stops only when every worker's device is idle."""
    if backend == "cuda":
        client.run(_synchronize_gpu)


def median_time(fn, reps: int, label: str | None = None) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after one warm-up call (it compiles and
    fills caches); with ``label``, a progress bar on a terminal."""
    fn()
    runs = range(reps)
    if label is not None:
        from dgvm.progress import track

        runs = track(runs, label, stream=sys.stderr, transient=True)
    times = []
    for _ in runs:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
