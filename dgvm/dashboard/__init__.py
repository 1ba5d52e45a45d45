"""dgvm's dashboard, inside the Dask dashboard of the scheduler.

- ``source``/``snapshot``/``counters``: one cheap snapshot of the GVAT, which all of
  these read:
- ``pages``/``panels``: Bokeh pages ``/individual-dgvm`` (all panels) and small per-panel
  pages ``/individual-dgvm-memory``, ``-migration``, ``-chunks``, ``-operations``;
- ``operations``: the operations the workers logged as their tasks ended, read on demand;
- ``api``: JSON at ``/dgvm/api/v1/allocations``, ``/workers``, ``/stats``, ``/operations``;
- ``metrics``: Prometheus families on the scheduler's ``/metrics``;
- ``mount``: how they join the scheduler's HTTP server (``register``, ``install``).

Schema and metric names: docs/dashboard.md.
"""

from dgvm.dashboard.mount import install, register

__all__ = ["install", "register"]
