"""Helpers of the tests that kill worker processes: a cluster of them, and bounded waits."""

from __future__ import annotations

import contextlib
import time

import dgvm


@contextlib.contextmanager
def process_cluster(backend: str = "cpu", n_workers: int = 4, device_memory: str = "64MiB"):
    """A connected client of a ``dgvm.LocalCluster`` of worker processes, each under a nanny
    that starts a new worker after a kill (``cuda``: one per GPU, 1 GiB each), closed after."""
    if backend == "cuda":
        cluster = dgvm.LocalCluster(backend="cuda", device_memory="1GiB", dashboard_address=None)
    else:
        cluster = dgvm.LocalCluster(n_workers=n_workers, backend="cpu", processes=True,
                                    device_memory=device_memory, dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def until(condition, timeout: float = 30.0, what: str = "condition"):
    """Wait for ``condition()`` to hold, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.02)


def workers(client) -> set:
    """The addresses of the workers the scheduler has now."""
    return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.workers)))


def running_on(client, worker: str) -> list:
    """The keys of the dgvm tasks the worker at ``worker`` has received and not ended:
    those of the direct plane (``dgvm.worker.direct``) and Dask's processing ones."""
    def direct(dask_worker):
        plugin = dask_worker.plugins.get("dgvm-store")
        return list(plugin.direct.ended) if plugin is not None else []

    keys = list(client.run(direct, workers=[worker]).get(worker, []))
    return keys + [str(k) for k in client.processing(workers=[worker]).get(worker, ())]
