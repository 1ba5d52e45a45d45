"""The Dask client an array operation runs on.

The given one, else the default one, else a new local cluster's (``dgvm.connect()``), so
that ``import dgvm.array as np`` is all a NumPy program needs.
"""

from __future__ import annotations

import logging

from distributed import default_client
from dgvm.client.direct import wait as wait_tasks

from dgvm import config, dask_compat
from dgvm.backends.cuda import gpu_count
from dgvm.client.allocation import live_allocations
from dgvm.client.session import connect
from dgvm.deploy.spawn_guard import ProgramNotRerunNanny, program_not_rerun


def current_client_or_none():
    """The default client, or None when no cluster is connected."""
    try:
        return default_client()
    except ValueError:
        return None


def client_for(client=None):
    """The given client, the default one, or a new local cluster's."""
    client = client or current_client_or_none()
    if client is not None:
        return client
    backend = config.get("backend")
    # In-process cpu workers: a script with no ``if __name__ == "__main__":`` guard
    # would otherwise be run again by every spawned worker process. GPU workers are
    # processes, and the scheduler gets one of its own: a program's operations then
    # do not wait on the scheduler's work for the interpreter lock
    # (``LocalCluster(scheduler_process=True)``). None of these processes, at start
    # or when a nanny restarts its worker, runs the program again (``dgvm.deploy.spawn_guard``).
    local = backend == "cpu" or (backend == "auto" and gpu_count() == 0)
    if local:
        client = connect(processes=False)
    else:
        with program_not_rerun():
            client = connect(scheduler_process=True, worker_class=ProgramNotRerunNanny)
    dask_compat.when_main_thread_ends(_close_quietly, client)
    return client


# How long the program's end waits for the work it left running on the implicit cluster.
EXIT_WAIT = 30.0


def _close_quietly(client) -> None:
    """When the program ends, the implicit cluster goes away with its memory, in order:
    the tasks still running finish (at most ``EXIT_WAIT`` seconds), then the client
    closes, then the cluster. Nothing is freed chunk by chunk, and Dask has nothing in
    flight to complain about."""
    if client.status != "running":
        return  # the program closed it itself
    cluster = client.cluster
    pending = [f for a in live_allocations(client) for f in a.pending.all()]
    try:
        wait_tasks(pending, timeout=EXIT_WAIT)  # their errors were the program's to see
    except Exception:  # noqa: BLE001  (timed out, or the cluster is going: close it anyway)
        pass
    # Dask may still log a heartbeat cut short by the closing scheduler: the program is
    # ending and the cluster is its own, so its last words are not the program's output.
    distributed_log = logging.getLogger("distributed")
    level = distributed_log.level
    distributed_log.setLevel(logging.CRITICAL)
    try:
        client.close()
        if cluster is not None:
            cluster.close()
    finally:
        distributed_log.setLevel(level)
