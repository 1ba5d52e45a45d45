"""The dashboard's JSON API on the scheduler's HTTP server (schema: docs/dashboard.md).

``GET /dgvm/api/v1/allocations`` (``?alloc_id=3``, ``?chunks=1``), ``/workers``
(``?include_lost=1``), ``/stats`` and ``/operations`` (``?since=<time>``, ``?limit=<n>``).
Rows are those of ``dgvm.table()``, ``dgvm.workers()`` and ``dgvm.stats()`` (built by the
same plugin methods), with fields added, and the operations the workers logged; every
answer also carries ``version`` (of this schema) and ``time`` (of the snapshot, or of the
answer where it needs none).
"""

from __future__ import annotations

import json
import time

from distributed.http.utils import RequestHandler

from dgvm.dashboard.snapshot import Snapshot
from dgvm.dashboard.source import DashboardSource
from dgvm.dashboard.urls import API_PREFIX as PREFIX
from dgvm.dashboard.urls import API_VERSION as VERSION
from dgvm.protocol.errors import InvalidAddress


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes", "on")


class BadArgument(ValueError):
    """A request's parameter that cannot be read (400)."""


def _number(handler, name: str, kind):
    """The request's parameter ``name`` as ``kind`` (int or float), or None."""
    value = handler.get_argument(name, None)
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise BadArgument(f"{name}={value!r}: expected {'an integer' if kind is int else 'a number'}") from None


class _JSONHandler(RequestHandler):
    """GET answers ``answer(source, snapshot)`` with the schema's version and the
    snapshot's time (that of the answer where ``snapshot`` is False: no snapshot is taken);
    404 when dgvm is not running or the request names no allocation, 400 for a parameter
    that cannot be read."""

    snapshot = True

    def get(self):
        source = DashboardSource.of(self.server)
        if source is None:
            return self.reply({"error": "dgvm is not running on this scheduler "
                                        "(start it with: dask scheduler --preload dgvm.scheduler)"}, 404)
        snap = source.snapshot() if self.snapshot else None
        try:
            body = self.answer(source, snap)
        except BadArgument as e:
            return self.reply({"error": str(e)}, 400)
        except (InvalidAddress, ValueError) as e:
            return self.reply({"error": str(e)}, 404)
        self.reply({"version": VERSION, "time": snap.time if snap is not None else time.time(), **body})

    def answer(self, source: DashboardSource, snap: Snapshot | None) -> dict:
        raise NotImplementedError

    def reply(self, body: dict, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(body))


class AllocationsHandler(_JSONHandler):
    def answer(self, source, snap):
        rows = snap.allocations
        alloc_id = self.get_argument("alloc_id", None)
        if alloc_id is not None:
            source.plugin.gvat.get(int(alloc_id))  # the error names a freed id as such
            rows = [r for r in rows if r["alloc_id"] == int(alloc_id)]
        if _flag(self.get_argument("chunks", None)):
            rows = [
                {**r, "chunks": source.plugin.table_rows(alloc_id=r["alloc_id"], chunks=True)[0]["chunks"]}
                for r in rows
            ]
        return {"allocations": rows}


class WorkersHandler(_JSONHandler):
    def answer(self, source, snap):
        rows = snap.workers
        if _flag(self.get_argument("include_lost", None)):
            live = {w["address"]: w for w in rows}
            rows = [
                live.get(r["address"], r) if r["status"] == "running" else r
                for r in source.plugin.workers(include_lost=True)
            ]
        return {"workers": rows}


class StatsHandler(_JSONHandler):
    def answer(self, source, snap):  # JSON writes the allocation ids as strings
        return {**snap.stats, "totals": snap.totals}


class OperationsHandler(_JSONHandler):
    """The operations the workers logged, newest last (at most ``operations.MAXLEN``):
    ``since`` keeps those that stopped after that time, ``limit`` the last ones."""

    snapshot = False  # the workers' log, not the GVAT

    def answer(self, source, snap):
        since, limit = _number(self, "since", float), _number(self, "limit", int)
        if limit is not None and limit < 0:
            raise BadArgument(f"limit={limit}: expected 0 or more")
        ops = source.operations
        ops.sync()
        rows = list(ops.rows)
        if since is not None:
            rows = [r for r in rows if r["stop"] > since]
        if limit is not None:
            rows = rows[max(0, len(rows) - limit):] if limit else []
        return {"operations": rows, "statuses": dict(ops.statuses)}


# (url without the dashboard prefix, handler, kwargs), as distributed's route modules list them
routes: list[tuple] = [
    (PREFIX + "allocations", AllocationsHandler, {}),
    (PREFIX + "workers", WorkersHandler, {}),
    (PREFIX + "stats", StatsHandler, {}),
    (PREFIX + "operations", OperationsHandler, {}),
]
