"""The Dask client an array operation runs on.

The given one, else the default one, else a new local cluster's (``dgvm.connect()``), so
that ``import dgvm.array as np`` is all a NumPy program needs.
"""

from __future__ import annotations

import atexit

from distributed import default_client

from dgvm import config
from dgvm.backends.cuda import gpu_count
from dgvm.client.session import connect
from dgvm.deploy.spawn_guard import ProgramNotRerunNanny, program_not_rerun


def client_for(client=None):
    """The given client, the default one, or a new local cluster's."""
    if client is not None:
        return client
    try:
        return default_client()
    except ValueError:
        pass
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
    atexit.register(_close_quietly, client)
    return client


def _close_quietly(client) -> None:
    """At exit, the implicit cluster goes away with its memory: close it before Dask's
    own exit handlers, so no worker is asked to free chunks while it shuts down."""
    cluster = client.cluster
    client.close()
    if cluster is not None:
        cluster.close()
