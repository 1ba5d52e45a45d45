"""The names that the three processes use to talk to each other.

Stream messages travel on Dask's batched streams (``{"op": NAME, ...}``); task keys of
dgvm's work start with ``TASK_PREFIX``, so a worker can tell them from other Dask tasks.
"""

from __future__ import annotations

# A task's report to the GVAT of what it wrote and read: worker -> scheduler.
REPORT = "dgvm-launched"
# An old home's release of moved chunks (dgvm.scheduler.releases): scheduler -> worker.
RELEASE = "dgvm-release"
# A worker left the cluster (dgvm.transfer.ipc_retire): scheduler -> dgvm workers.
PEER_LEFT = "dgvm-peer-left"

# Every task dgvm submits has a key that starts so (dgvm.client.dispatch).
TASK_PREFIX = "dgvm-"
