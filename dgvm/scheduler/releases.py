"""Old homes giving up moved chunks, in the background of a move.

A move ends when the GVAT records the new home. The old home's copy is then released
by a message on the scheduler's stream to that worker (``messages.RELEASE``), not by a
request the move waits for: that saves the move one round trip (a quarter of a small
migration). Nothing can read the old copy meanwhile:

- readers locate chunks through the GVAT, which names the new home already, and a
  replica copied from the old home is refused as stale;
- every later task on the old worker comes after the message on the same stream, and
  the worker finishes the release before it reads the next message.

Requests that must not overtake a release name the last one sent to their worker
(``last_sent``), and the worker does that one first (``ChunkStorePlugin._after_releases``):
a pull there (it could make the chunk its home again before the old copy goes), an
allocation there (the GVAT counted that memory as free already) and ``dgvm.stats()``
(the stores' figures after every move). The worker waits, not the scheduler: a re-home
runs inside the handler of a worker's own report, ahead of anything that worker sends
after it. A free of the allocation is also sent to its old homes (``old_homes``),
which drop the copy themselves if the release has not come yet.

A worker asked to wait for a release it has not done yet asks the scheduler for the last
ticket sent to it (``messages.RELEASES_SENT``: ``last_sent``) and refuses a later one at
once: no such release is on its way. The scheduler records a ticket as sent before any
request names it, so a real one always passes.

The worker's scheduler stream is held while the release runs: it waits for the chunk's
current reader (the store's lock), milliseconds.
"""

from __future__ import annotations

import itertools
import logging

from dgvm.protocol import messages
from dgvm.protocol.records import AllocId, ReleaseTicket, WorkerAddress
from dgvm.streams import tell

logger = logging.getLogger("dgvm.scheduler")


class PendingReleases:
    """The last release sent to each worker, and the old homes of each allocation."""

    def __init__(self):
        self._tickets = itertools.count()
        self._last_sent: dict[WorkerAddress, ReleaseTicket] = {}
        self._old_homes: dict[AllocId, set[WorkerAddress]] = {}

    def send(self, stream, address: WorkerAddress, alloc_id: AllocId, indices: list) -> None:
        """Tell ``address`` (on its scheduler stream) to release ``indices``."""
        ticket = next(self._tickets)
        if not tell(stream, messages.release(alloc_id, indices, ticket)):  # the worker is leaving, and its chunks with it
            logger.info("dgvm: %s is gone; its chunks of allocation %s go with it", address, alloc_id)
            return
        self._last_sent[address] = ticket
        self._old_homes.setdefault(alloc_id, set()).add(address)

    def last_sent(self, address: WorkerAddress) -> ReleaseTicket | None:
        """The ticket of the last release sent to ``address`` (None: none since it joined).
        Tickets only grow, and a worker does its releases in order."""
        return self._last_sent.get(address)

    def old_homes(self, alloc_id: AllocId) -> set[WorkerAddress]:
        """The workers told to release chunks of ``alloc_id`` (forgotten: it is freed)."""
        return self._old_homes.pop(alloc_id, set())

    def worker_left(self, address: WorkerAddress) -> None:
        """Its releases are moot: its memory went with it."""
        self._last_sent.pop(address, None)
