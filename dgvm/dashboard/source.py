"""The dashboard's view of one scheduler: snapshots on demand, and a short history of
transfer rates.

``install`` makes one ``DashboardSource`` per scheduler (``scheduler.extensions
["dgvm-dashboard"]``). Pages, the JSON API and the Prometheus collector all read from it:
snapshots of the GVAT, rates, and the operations the workers logged (``operations``).
Many open pages share one snapshot per refresh period; nobody watching costs nothing.
"""

from __future__ import annotations

import time

from dgvm import config
from dgvm.dashboard.counters import Rates, Totals
from dgvm.dashboard.operations import Operations
from dgvm.dashboard.snapshot import Snapshot, Spread, build

EXTENSION = "dgvm-dashboard"
#: rows of rate history kept (10 minutes at the default refresh of 1s)
HISTORY = 600


def refresh_seconds() -> float:
    """``dgvm.dashboard.refresh`` in seconds (at least 0.1)."""
    return max(0.1, config.get_seconds("dashboard.refresh", "1s"))


class DashboardSource:
    def __init__(self, scheduler, plugin):
        self.scheduler = scheduler
        self.plugin = plugin
        self.refresh = refresh_seconds()
        self._spread = Spread()
        self._totals = Totals()
        self._last: Snapshot | None = None
        # rates between the totals of snapshots at least half a refresh period apart
        self.rates = Rates(HISTORY, every=self.refresh / 2)
        # the operations the workers logged, read when a page, the API or /metrics asks
        self.operations = Operations(scheduler)

    def snapshot(self, max_age: float = 0.0) -> Snapshot:
        """A snapshot no older than ``max_age`` seconds (0: a fresh one)."""
        now = time.time()
        if self._last is not None and now - self._last.time <= max_age:
            return self._last
        snap = build(self.plugin, self._spread, self._totals)
        self.rates.add(snap.time, snap.totals)
        self._last = snap
        return snap

    @property
    def running(self) -> bool:
        return getattr(self.scheduler.status, "name", "") not in (
            "closing", "closing_gracefully", "closed", "failed", "stopped",
        )

    @classmethod
    def of(cls, scheduler) -> DashboardSource | None:
        return scheduler.extensions.get(EXTENSION)
