"""Cluster-wide access counters that never go down.

Each worker's chunk store counts hits, misses, home moves, evictions and bytes per
transfer path since it started, and reports them in its heartbeat and in every task's
launch report (``latest`` keeps the later of the two). Summed over the live
workers these totals would drop whenever a worker leaves, so ``Totals`` keeps what every
worker that left (or registered again under a new uid) had reported last: the sum it
answers only grows, as Prometheus counters must. ``Rates`` turns successive totals into
the rows of the migration plot, once for every open page.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Hashable

#: per-worker counters (``StoreStats``) that the totals add up
FIELDS = ("hits", "misses", "rehomes", "evicted", "transient", "gathered", "ahead", "pushed")
#: counters per transfer path
PATH_FIELDS = ("count", "bytes", "seconds")


def latest(seen: dict | None, stats: dict) -> dict:
    """Two readings of one store's counters (``StoreStats``, nested by path), which may
    arrive in either order, as one: each counter the larger, that is the later, as the
    counters only grow. What only ``seen`` has stays as it is."""
    if not seen:
        return stats
    out = dict(seen)
    for k, v in stats.items():
        mine = out.get(k)
        if isinstance(v, dict):
            out[k] = latest(mine, v) if isinstance(mine, dict) else v
        else:
            out[k] = v if mine is None else max(mine, v)
    return out


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


class Rates:
    """One row per interval between (time, ``nest``ed totals) points at least ``every``
    seconds apart: time (ms), bytes/s per transfer path, the hit rate of kernel reads (NaN
    with no reads), re-homes. Each row is made once, when its point is added; a reader
    asks for the rows it has not seen (``since``), so every open page streams the same rows."""

    def __init__(self, maxlen: int, every: float):
        self.rows: deque[dict] = deque(maxlen=maxlen)
        self.every = every
        self.added = 0  # rows ever added
        self.last: tuple[float, dict] | None = None  # the newest point

    def add(self, t: float, totals: dict) -> None:
        """Take the totals at time ``t`` unless the newest point is less than ``every`` old."""
        if self.last is not None:
            if t - self.last[0] < self.every:
                return
            t0, before = self.last
            dt = t - t0
            row = {"time": t * 1000}
            for path, p in totals["paths"].items():
                row[path] = (p["bytes"] - before["paths"].get(path, {}).get("bytes", 0)) / dt
            hits, misses = totals["hits"] - before["hits"], totals["misses"] - before["misses"]
            row["hit_rate"] = hits / (hits + misses) if hits + misses else float("nan")
            row["rehomes"] = totals["rehomes"] - before["rehomes"]
            self.rows.append(row)
            self.added += 1
        self.last = (t, totals)

    def since(self, added: int) -> list[dict]:
        """The rows added after the first ``added`` (those still kept)."""
        n = min(self.added - added, len(self.rows))
        return list(islice(self.rows, len(self.rows) - n, None))
