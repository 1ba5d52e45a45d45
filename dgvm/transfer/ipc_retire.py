"""A worker's side of giving back buffers that peers keep mapped (``ipc_exports``).

The backend marks an exported buffer *retiring* when it gives it up; this asks every
importer to forget it (``messages.IPC_FORGET``, which waits for a copy in progress) and then
drops the buffer, off the event loop (cudaFree waits for the device). An importer that
does not answer is asked again a second later; one that left the cluster (the scheduler
says so with ``messages.PEER_LEFT``) is not asked any more: its mappings went with it.
"""

from __future__ import annotations

import asyncio
import logging

from dgvm.protocol import messages

logger = logging.getLogger("dgvm.worker")

FORGET_TIMEOUT = 5.0  # seconds an importer may take to close (its copies are milliseconds)
RETRY_AFTER = 1.0


class IpcRetirement:
    """One worker's retirement of its exported buffers (``exports``, its backend's);
    ``mappings`` are the worker's own mappings of its peers' buffers."""

    def __init__(self, worker, exports, mappings):
        self.worker = worker
        self.exports = exports
        self.mappings = mappings
        self._lock = asyncio.Lock()
        exports.on_retire = self.soon

    def soon(self) -> None:
        """Retire what is waiting, on the event loop (callable from any thread)."""
        self.worker.loop.add_callback(self.run)

    async def run(self) -> None:
        """Ask the importers of every retiring buffer to forget it, then free those whose
        importers all answered; the others are asked again a second later."""
        async with self._lock:
            ask, who = self.exports.take_retiring()
            if not who:
                return
            try:
                answers = await self._ask(ask)
                failed = {p: a for p, a in zip(ask, answers) if isinstance(a, BaseException)}
                done = [k for k, importers in who.items() if not importers & failed.keys()]
                if failed:
                    logger.info("dgvm: %s asks %s again to forget its buffers (%r)",
                                self.worker.address, sorted(failed), next(iter(failed.values())))
                    self.exports.retry([k for k in who if k not in done])
                    self.worker.loop.call_later(RETRY_AFTER, self.soon)
                # cudaFree waits for the device: off the event loop
                await asyncio.get_running_loop().run_in_executor(None, self.exports.retired, done)
            except BaseException:  # cancelled (closing): nothing is lost, asked again later
                self.exports.retry(list(who))
                raise

    async def _ask(self, ask: dict) -> list:
        me = self.worker.address
        return await asyncio.gather(*(
            asyncio.wait_for(
                messages.call(self.worker.rpc(peer), messages.IPC_FORGET,
                              holder=me, handles=handles, timeout=FORGET_TIMEOUT),
                FORGET_TIMEOUT + 1,
            )
            for peer, handles in ask.items()
        ), return_exceptions=True)

    async def forget_everywhere(self) -> None:
        """Closing: every importer closes its mappings of this worker's buffers (and
        refuses those handles later) before they go with the store; best effort, as
        peers may be closing too."""
        await self._ask(self.exports.importers())

    def peer_left(self, address: str) -> None:
        """``address`` left: no importer to ask any more, and its buffers are gone."""
        self.exports.peer_gone(address)
        self.worker.loop.run_in_executor(None, self.mappings.forget_now, address, None, FORGET_TIMEOUT)
        self.soon()
