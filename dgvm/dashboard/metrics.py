"""dgvm's Prometheus metrics, served on the scheduler's existing ``/metrics``.

distributed's ``/metrics`` handler writes out ``prometheus_client``'s global registry;
``register`` adds one collector to it (once per process: the registry is the process's,
and so is what every ``/metrics`` of the process serves). Each scrape takes a fresh
snapshot of the newest running scheduler's GVAT, and reads the operations the workers
logged since the last read. Labels stay bounded: worker addresses, device names, four
memory states, the transfer paths and the statuses of operations. Counters are cluster
totals that never go down, also when workers leave (``counters.Totals``).
"""

from __future__ import annotations

import threading
import weakref

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dgvm.dashboard.source import DashboardSource

#: the parts of a device's dgvm capacity; they add up to it
STATES = ("home", "replica", "other", "free")


def families(source: DashboardSource):
    """The metric families of one snapshot of ``source``."""
    snap = source.snapshot()
    device = GaugeMetricFamily(
        "dgvm_device_bytes",
        "Bytes of each worker's dgvm device capacity: chunks homed there (home), read "
        "replicas (replica), used by others (other), free",
        labels=["worker", "device", "state"],
    )
    capacity = GaugeMetricFamily(
        "dgvm_device_capacity_bytes", "Device memory each worker offers to dgvm",
        labels=["worker", "device"],
    )
    total = GaugeMetricFamily(
        "dgvm_device_total_bytes", "Memory of each worker's whole device",
        labels=["worker", "device"],
    )
    for w in snap.workers:
        labels = [w["address"], w["device"]]
        parts = {
            "home": w["used"] - w["replica_bytes"], "replica": w["replica_bytes"],
            "other": w["other_used"], "free": w["free"],
        }
        for state in STATES:
            device.add_metric([*labels, state], parts[state])
        capacity.add_metric(labels, w["capacity"])
        if w["device_total"] is not None:
            total.add_metric(labels, w["device_total"])
    yield device
    yield capacity
    yield total
    yield GaugeMetricFamily("dgvm_workers", "Workers holding a dgvm chunk store", value=len(snap.workers))
    yield GaugeMetricFamily("dgvm_allocations", "Live allocations in the GVAT", value=len(snap.allocations))
    yield GaugeMetricFamily(
        "dgvm_allocated_bytes", "Bytes of all live allocations",
        value=sum(a["nbytes"] for a in snap.allocations),
    )
    t = snap.totals
    yield CounterMetricFamily("dgvm_chunk_hits", "Chunks kernels found on their worker", value=t["hits"])
    yield CounterMetricFamily("dgvm_chunk_misses", "Chunks kernels fetched from another worker", value=t["misses"])
    yield CounterMetricFamily("dgvm_rehomes", "Chunks whose home moved (re-homing, migrate, rebalance)", value=t["rehomes"])
    yield CounterMetricFamily("dgvm_evictions", "Read replicas dropped to make room", value=t["evicted"])
    yield CounterMetricFamily("dgvm_gathered_regions",
                              "Regions operations read from several chunks into a new array", value=t.get("gathered", 0))
    yield CounterMetricFamily("dgvm_pieces_ahead", "Pieces of other workers' chunks asked for ahead", value=t.get("ahead", 0))
    yield CounterMetricFamily("dgvm_pieces_pushed", "Pieces of other workers' chunks their homes pushed and tasks took",
                              value=t.get("pushed", 0))
    moved = CounterMetricFamily(
        "dgvm_migrations", "Chunks copied between workers (replicas and moved homes), per path",
        labels=["path"],
    )
    nbytes = CounterMetricFamily(
        "dgvm_migration_bytes", "Bytes copied between workers, per path", labels=["path"],
    )
    for path, p in t["paths"].items():
        moved.add_metric([path], p["count"])
        nbytes.add_metric([path], p["bytes"])
    yield moved
    yield nbytes
    ops = source.operations
    ops.sync()
    done = CounterMetricFamily(
        "dgvm_operations", "dgvm tasks that ended on the workers, per status (finished, error)",
        labels=["status"],
    )
    for status, n in ops.statuses.items():
        done.add_metric([status], n)
    yield done


class DgvmCollector:
    """A ``prometheus_client`` collector over the newest running scheduler's GVAT of the
    sources added (a process serves one scheduler, except in tests, which run their
    clusters one at a time)."""

    def __init__(self):
        self._sources: list[weakref.ref] = []  # newest last

    def add(self, source: DashboardSource) -> None:
        self._sources = [r for r in self._sources if r() is not None] + [weakref.ref(source)]

    def current(self) -> DashboardSource | None:
        for ref in reversed(self._sources):
            s = ref()
            if s is not None and s.running:
                return s
        return None

    def collect(self):
        source = self.current()
        if source is not None:
            yield from families(source)


# The collector in prometheus_client.REGISTRY, made by the first scheduler of the process
# to serve dgvm (the registry is the process's: the collector is too).
_collector: DgvmCollector | None = None
_lock = threading.Lock()


def register(source: DashboardSource) -> None:
    """Serve ``source`` on ``/metrics``: add it to this process's collector, which is
    added to ``prometheus_client.REGISTRY`` once."""
    global _collector
    with _lock:
        if _collector is None:
            _collector = DgvmCollector()
            prometheus_client.REGISTRY.register(_collector)
        _collector.add(source)
