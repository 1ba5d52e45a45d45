"""A worker's side of giving back buffers that peers keep mapped (``ipc_exports``).

The backend marks an exported buffer *retiring* when it gives it up; this asks every
importer to forget it (``dgvm_ipc_forget``, which waits for a copy in progress) and then
drops the buffer, off the event loop (cudaFree waits for the device). An importer that
does not answer is asked again a second later; one that left the cluster (the scheduler
says so with ``dgvm-peer-left``) is not asked any more: its mappings went with it.
"""

from __future__ import annotations

import asyncio
import logging

logger = logging.getLogger("dgvm.worker")

FORGET_TIMEOUT = 5.0  # seconds an importer may take to close (its copies are milliseconds)
RETRY_AFTER = 1.0


class IpcRetirement:
    def __init__(self, worker, exports):
        self.worker = worker
        self.exports = exports
        self._lock = asyncio.Lock()
        exports.on_retire = self.soon

    def soon(self) -> None:
        """Retire what is waiting, on the event loop (callable from any thread)."""
        self.worker.loop.add_callback(self.run)

    async def run(self) -> None:
        """Ask the importers of every retiring buffer to forget it, then free them."""
        async with self._lock:
            ask, keys = self.exports.take_retiring()
            if not keys:
                return
            answers = await self._ask(ask)
            failed = {p: a for p, a in zip(ask, answers) if isinstance(a, BaseException)}
            if failed:
                logger.info("dgvm: %s kept %d buffers to retire: %s did not forget them (%r)",
                            self.worker.address, len(keys), sorted(failed), next(iter(failed.values())))
                self.exports.retry(keys)
                self.worker.loop.call_later(RETRY_AFTER, self.soon)
                return
            await asyncio.get_running_loop().run_in_executor(None, self.exports.retired, keys)

    async def _ask(self, ask: dict) -> list:
        me = self.worker.address
        return await asyncio.gather(*(
            asyncio.wait_for(
                self.worker.rpc(peer).dgvm_ipc_forget(holder=me, handles=handles, timeout=FORGET_TIMEOUT),
                FORGET_TIMEOUT + 1,
            )
            for peer, handles in ask.items()
        ), return_exceptions=True)

    async def forget_everywhere(self) -> None:
        """Closing: every importer closes all its mappings of this worker's buffers
        before they go with the store (best effort: peers may be closing too)."""
        await self._ask({peer: None for peer in self.exports.importers()})

    def peer_left(self, address: str) -> None:
        """``address`` left: no importer to ask any more, and its buffers are gone."""
        from dgvm.transfer import cuda_ipc

        self.exports.peer_gone(address)
        self.worker.loop.run_in_executor(None, cuda_ipc.mappings().forget_now, address)
        self.soon()
