"""Old homes giving up moved chunks, in the background of a move.

A move ends when the GVAT records the new home. The old home's copy is then released
by a message on the scheduler's stream to that worker (``streams.RELEASE``), not by a request
the move waits for: that saves the move one round trip (a quarter of a small
migration). Nothing can read the old copy meanwhile:

- readers locate chunks through the GVAT, which names the new home already, and a
  replica copied from the old home is refused as stale;
- every later task on the old worker comes after the message on the same stream, and
  the worker finishes the release before it reads the next message.

What must not overtake a release:

- a pull to the same worker (it could make the chunk its home again before the old
  copy goes): the pull names the last release sent there (``last_sent``) and the worker
  waits until it has done that one. The worker waits, not the scheduler: a re-home runs
  inside the handler of the same worker's report, and the answer to a release comes on
  that worker's stream, behind the report;
- an allocation there (the GVAT counted that memory as free already), a free of the
  allocation and ``dgvm.stats()`` (they answer with the memory back): these requests
  from clients wait here (``settled``) for the worker's answer, ``streams.RELEASED``,
  which it sends once the memory is back (buffers peers had mapped retired too).

The worker's scheduler stream is held while the store's thread does the release: a
release waits for the chunk's current reader (the store's lock), milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from dgvm.streams import RELEASE

logger = logging.getLogger("dgvm.scheduler")

WAIT_LIMIT = 10.0  # seconds a settle waits for a worker that does not answer


class PendingReleases:
    """The releases sent and not yet answered, by worker and by allocation."""

    def __init__(self):
        self._tickets = itertools.count()
        self._pending: dict[int, tuple[str, int, asyncio.Event]] = {}
        self._by_address: dict[str, set[int]] = {}
        self._last_sent: dict[str, int] = {}

    def send(self, stream, address: str, alloc_id: int, indices: list) -> None:
        """Tell ``address`` (on its scheduler stream) to release ``indices``."""
        if stream is None:  # the worker is gone, and its chunks with it
            return
        ticket = next(self._tickets)
        try:
            stream.send({"op": RELEASE, "alloc_id": alloc_id, "indices": indices, "ticket": ticket})
        except Exception as e:  # noqa: BLE001  the stream is closing: the worker is leaving
            logger.info("dgvm: telling %s to release chunks of allocation %s failed: %s",
                        address, alloc_id, e)
            return
        self._pending[ticket] = (address, alloc_id, asyncio.Event())
        self._by_address.setdefault(address, set()).add(ticket)
        self._last_sent[address] = ticket

    def last_sent(self, address: str) -> int | None:
        """The ticket of the last release sent to ``address`` (None: none since it joined).
        Tickets only grow, and a worker does its releases in order."""
        return self._last_sent.get(address)

    def done(self, ticket: int) -> None:
        """The worker released (stream message ``streams.RELEASED``)."""
        entry = self._pending.pop(ticket, None)
        if entry is None:
            return
        address, _, event = entry
        tickets = self._by_address.get(address)
        if tickets is not None:
            tickets.discard(ticket)
            if not tickets:
                del self._by_address[address]
        event.set()

    def worker_left(self, address: str) -> None:
        """Its releases will never be answered; its memory went with it."""
        self._last_sent.pop(address, None)
        for ticket in list(self._by_address.get(address, ())):
            self.done(ticket)

    async def settled(self, addresses=None, alloc_id: int | None = None) -> None:
        """Wait for the releases sent to ``addresses`` (every worker when None) or of
        ``alloc_id``. Returns at once when none is pending, the usual case."""
        if not self._pending:
            return
        if alloc_id is not None:
            events = [e for _, a, e in self._pending.values() if a == alloc_id]
        else:
            wanted = self._by_address if addresses is None else addresses
            events = [self._pending[t][2] for a in wanted for t in self._by_address.get(a, ())]
        if not events:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), WAIT_LIMIT)
        except asyncio.TimeoutError:
            logger.warning("dgvm: %d chunk releases unanswered after %.0f s; going on",
                           len(events), WAIT_LIMIT)
