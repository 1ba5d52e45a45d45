"""What a client session does when the scheduler says a worker left.

The GVAT publishes each departure (``messages.LEFT_TOPIC``). The session's requests in
flight to that worker stop waiting (``transfer.LeftPeers``; else a request to a dead
process waits for Dask's connect timeout, 30 s), and the parts that named the worker
hear of it (``on_left``: the live allocations mark their chunk maps stale, so that the
next use of a lost chunk raises ``ChunkLost`` at once, from the fresh map).
"""

from __future__ import annotations

import collections
import threading

from dgvm.client import failures
from dgvm.protocol import messages
from dgvm.transfer import LeftPeers

REMEMBERED = 256  # departures kept for ``wait_left``


class LeftWorkers:
    """A session part: its requests to workers, and who to tell when one leaves."""

    def __init__(self, session):
        self.peers = LeftPeers()
        self._listeners: list = []
        self._recent: collections.deque = collections.deque(maxlen=REMEMBERED)
        self._news = threading.Condition()
        session.client.subscribe_topic(messages.LEFT_TOPIC, self._on_left)

    def on_left(self, fn) -> None:
        """Call ``fn(address)`` when a worker leaves (on the client's event loop)."""
        self._listeners.append(fn)

    def wait_left(self, addresses, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for news that one of ``addresses`` left (a
        request to it failed: the scheduler may not have removed it yet); True if one did."""
        with self._news:
            return self._news.wait_for(lambda: any(a in self._recent for a in addresses), timeout)

    def _on_left(self, event) -> None:
        _, msg = event
        if "ran" in msg:  # a task that had finished on a worker that left, failing next
            failures.ran(msg["ran"])
            return
        address = msg["worker"]
        for fn in list(self._listeners):
            fn(address)
        self.peers.left(address)
        with self._news:
            self._recent.append(address)
            self._news.notify_all()
