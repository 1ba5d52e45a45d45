"""Timing shared by the benchmarks: the median of repeated runs after a warm-up, the end
of a peer's GPU work, and dask.array's blocks on the device with fresh keys per run."""

from __future__ import annotations

import statistics
import sys
import time
import uuid

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
        from dgvm.client.progress import track

        runs = track(runs, label, stream=sys.stderr, transient=True)
    times = []
    for _ in runs:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def device_time(xp, fn, reps: int) -> float:
    """``median_time`` of ``fn()`` run here with ``xp`` (NumPy, or CuPy: to the end of
    its device work)."""
    def run():
        fn()
        if xp.__name__ == "cupy":
            xp.cuda.Device().synchronize()
    return median_time(run, reps)


def array_module(backend: str):
    """The array library of a backend's blocks: CuPy on cuda, NumPy on cpu."""
    if backend == "cuda":
        import cupy

        return cupy
    import numpy

    return numpy


def on_device(block, backend: str):
    """A dask.array block moved to ``backend``'s device (``map_blocks(on_device, backend=...)``)."""
    return array_module(backend).asarray(block)


def _same(block):
    return block


def fresh(v):
    """``v`` with new keys (an identity layer): the same expression has the same keys
    each run, and a run must not find the previous one's result in memory."""
    return v.map_blocks(_same, name=f"bench-{uuid.uuid4().hex}", dtype=v.dtype)


def dask_done(client, backend: str, v):
    """Compute the dask.array ``v`` under fresh keys, to the end of its device work."""
    from distributed import wait

    v = fresh(v).persist()
    wait(v)
    finish_device_work(client, backend)
    return v


def direct_plane_backend(script: str, backend: str) -> str:
    """The backend ``backend`` names (``auto``: cuda where a GPU is visible), for a
    diagnostic that times the direct plane's internals: it exits saying so when
    ``dgvm.dispatch.plane`` is not ``direct``. Dask's own logs above errors are muted."""
    import logging

    from dgvm import backends, config

    logging.getLogger("distributed").setLevel(logging.ERROR)
    if config.get("dispatch.plane") != "direct":
        raise SystemExit(f"{script} times the direct plane (dgvm.dispatch.plane: direct)")
    return backends.resolve(backend)
