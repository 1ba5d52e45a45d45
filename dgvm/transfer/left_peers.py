"""Requests to a peer that stop waiting when it leaves the cluster.

A request to a worker whose process died waits for Dask's connect timeout (30 s by
default: Dask retries a refused connection until then) before it fails. The scheduler
tells everyone when it removes a worker (clients: ``messages.LEFT_TOPIC``, workers:
``messages.PEER_LEFT``); a request made through ``LeftPeers.call`` gives up then.

A request whose connection breaks first (the peer's process died, the scheduler has not
removed it yet) waits a moment for the news too, so that its caller hears ``gone()``.

A request that starts after the news was handled is not stopped by it: the news also
marks what named the worker stale (clients' chunk maps), and the GVAT answers for its
chunks with ``ChunkLost`` from then on.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from dgvm.protocol.errors import peer_leaving

GRACE = 5.0  # seconds a request whose connection broke waits for news that its peer left


class LeftPeers:
    """The requests in flight to each peer, to stop when it leaves. Used on one event
    loop (a client's, or a worker's)."""

    def __init__(self):
        self._waiting: dict[str, set[asyncio.Future]] = {}

    def left(self, address: str) -> None:
        """The peer at ``address`` left: its requests in flight stop waiting."""
        for flag in self._waiting.pop(address, ()):
            if not flag.done():
                flag.set_result(None)

    async def call(self, address: str, request: Awaitable, gone: Callable[[], Exception],
                   grace: float | None = None):
        """Await ``request`` to ``address``; raise ``gone()`` if the peer leaves first.

        A request whose connection breaks (``OSError``) as the peer dies, or that a peer
        closing answers ``PeerClosing``, fails before the scheduler has removed it: the
        news is awaited up to ``grace`` seconds (default ``GRACE``), so that the caller gets
        ``gone()`` (a ``ChunkLost`` naming the chunks) rather than a raw comm error; without
        news, that error is raised. A refusal (``AccessDenied``), or a ``ConnectionBroke``
        the peer passed on from its own request, is raised at once."""
        task = asyncio.ensure_future(request)
        flag = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(address, set())
        waiting.add(flag)
        try:
            await asyncio.wait({task, flag}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                raise gone()
            error = task.exception()
            if peer_leaving(error):
                done, _ = await asyncio.wait({flag}, timeout=GRACE if grace is None else grace)
                if done:
                    raise gone() from error
            return task.result()
        except BaseException:  # cancelled: the request goes too
            task.cancel()
            raise
        finally:
            waiting.discard(flag)
            if not waiting and self._waiting.get(address) is waiting:
                del self._waiting[address]
