"""Cluster-wide access counters that never go down.

Each worker's chunk store counts hits, misses, home moves, evictions and bytes per
transfer path since it started, and reports them in its heartbeat. Summed over the live
workers these totals would drop whenever a worker leaves, so ``Totals`` keeps what every
worker that left (or registered again under a new uid) had reported last: the sum it
answers only grows, as Prometheus counters must.
"""

from __future__ import annotations

from typing import Hashable

#: per-worker counters (``StoreStats``) that the totals add up
FIELDS = ("hits", "misses", "rehomes", "evicted", "transient")
#: counters per transfer path
PATH_FIELDS = ("count", "bytes", "seconds")


def flatten(stats: dict) -> dict[tuple, float]:
    """{("hits",): 3, ("paths", "shm", "bytes"): 4096, ...} from a ``StoreStats`` dict."""
    flat: dict[tuple, float] = {(f,): stats.get(f, 0) for f in FIELDS}
    for path, p in (stats.get("paths") or {}).items():
        for f in PATH_FIELDS:
            flat[("paths", path, f)] = p.get(f, 0)
    return flat


def nest(flat: dict[tuple, float], paths=()) -> dict:
    """The inverse of ``flatten``; every path in ``paths`` is present (zeros if unused)."""
    out: dict = {f: 0 for f in FIELDS}
    out["paths"] = {p: {f: 0 for f in PATH_FIELDS} for p in paths}
    for key, v in flat.items():
        if key[0] == "paths":
            out["paths"].setdefault(key[1], {f: 0 for f in PATH_FIELDS})[key[2]] = v
        else:
            out[key[0]] = v
    return out


class Totals:
    """Monotonic sums of per-worker counters, keyed by worker incarnation."""

    def __init__(self):
        self._last: dict[Hashable, dict[tuple, float]] = {}
        self._retired: dict[tuple, float] = {}

    def update(self, current: dict[Hashable, dict]) -> dict[tuple, float]:
        """Take the counters each live worker reports now (key: (address, uid)); return
        the flat totals. A worker gone, or whose counters went down (it restarted), has
        its last report retired into the totals."""
        flat = {k: flatten(s) for k, s in current.items()}
        for key, old in self._last.items():
            new = flat.get(key)
            if new is None or any(new.get(f, 0) < v for f, v in old.items()):
                for f, v in old.items():
                    self._retired[f] = self._retired.get(f, 0) + v
        self._last = flat
        total = dict(self._retired)
        for counters in flat.values():
            for f, v in counters.items():
                total[f] = total.get(f, 0) + v
        return total
