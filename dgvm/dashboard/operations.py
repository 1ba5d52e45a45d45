"""The dgvm operations that ran on the workers, as the dashboard shows them.

A worker logs each task of the direct plane when it ends (``messages.OPERATIONS_TOPIC``:
key, worker, start, stop, status, chunks); the scheduler keeps the last
``distributed.admin.low-level-log-length`` events of the topic. ``Operations`` turns the
events it has not seen yet into rows, once each, and keeps the last ``maxlen`` of them;
a reader asks for the rows it has not seen (``since``), as of ``counters.Rates``, so
every open page streams the same rows and nothing is read while nobody watches.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from dgvm.protocol import messages

#: rows kept (and drawn at most): the scheduler's default event log length
MAXLEN = 1000
#: the statuses a worker reports
STATUSES = ("finished", "error")


def operation_name(key: str) -> str:
    """``dgvm-add-1a2b3c4d5e`` -> ``add``; ``dgvm-launch-axpy-...`` -> ``launch-axpy``
    (the key without the task prefix and its random suffix)."""
    if key.startswith(messages.TASK_PREFIX):
        key = key[len(messages.TASK_PREFIX):]
    return key.rsplit("-", 1)[0] if "-" in key else key


def row(msg: dict) -> dict:
    """The dashboard's row of one logged operation (docs/dashboard.md, operations)."""
    key = str(msg.get("key", ""))
    start, stop = float(msg.get("start", 0.0)), float(msg.get("stop", 0.0))
    return {
        "key": key,
        "name": operation_name(key),
        "worker": str(msg.get("worker", "")),
        "start": start,
        "stop": stop,
        "duration": stop - start,
        "status": str(msg.get("status", "")),
        "chunks": int(msg.get("chunks", 0)),
    }


class Operations:
    """The last ``maxlen`` operations the workers logged on ``scheduler``, newest last
    (in the order the scheduler received them), and how many ended in each status."""

    def __init__(self, scheduler, maxlen: int = MAXLEN):
        self.scheduler = scheduler
        self.rows: deque[dict] = deque(maxlen=maxlen)
        self.added = 0  # rows ever added
        #: operations seen per status; counted when first read, so an operation whose
        #: event left the scheduler's log before any reader came (more than its length
        #: ended in between) is not counted
        self.statuses: dict[str, int] = dict.fromkeys(STATUSES, 0)
        self._last = None  # the newest event read (the scheduler's own tuple)

    def sync(self) -> None:
        """Read the events logged since the last call: those after the newest one read
        (compared by identity: the scheduler's log holds the same tuple objects)."""
        events = self.scheduler.get_events(messages.OPERATIONS_TOPIC)
        new = []
        for event in reversed(events):
            if event is self._last:
                break
            new.append(event)
        if not new:
            return
        self._last = new[0]
        for _, msg in reversed(new):
            if not isinstance(msg, dict):
                continue
            r = row(msg)
            self.rows.append(r)
            self.added += 1
            self.statuses[r["status"]] = self.statuses.get(r["status"], 0) + 1

    def since(self, added: int) -> list[dict]:
        """The rows added after the first ``added`` (those still kept)."""
        n = min(self.added - added, len(self.rows))
        return list(islice(self.rows, len(self.rows) - n, None))
