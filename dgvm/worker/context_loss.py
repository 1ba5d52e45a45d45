"""A worker whose device context a fault ended restarts.

A kernel that reads or writes an illegal address, or traps, ends the CUDA context of its
process: every later call on the device fails (CUDA's "sticky" errors), so the chunks the
worker holds cannot be read and nothing it runs can succeed. The worker checks its device
when a dgvm task fails (``ContextWatch.task_failed``; the check waits for the device, so
off the event loop). When the context is gone it tells the GVAT which task ended it
(``messages.CONTEXT_LOST``: that task fails with its own ``KernelError`` and is never run
again elsewhere, where it would end another context) and exits. Its nanny starts a new
worker process, and the scheduler treats its chunks as those of any worker that dies:
lost, or taken over by their copies (``replicas=k``). A worker without a nanny closes.
"""

from __future__ import annotations

import asyncio
import logging
import os

from distributed.core import Status

from dgvm.protocol import messages

logger = logging.getLogger("dgvm.worker")

NOTICE_WAIT = 10.0  # seconds the exit waits for the GVAT to hear which task ended the context
EXIT_CODE = 86  # the worker process's exit status (its nanny restarts it)


def ended_note(backend, address: str) -> str:
    """The sentence a ``KernelError`` gets when the fault ended the device context of the
    worker at ``address`` ("" when it did not: the device still works). Called from a
    task's thread: it waits for the device."""
    if not backend.may_lose_context or not backend.context_lost():
        return ""
    backend.context_ended = True
    return (f"; the fault ended the {backend.name} context of worker {address}: the worker "
            "restarts, and its chunks are lost or taken over by their copies, as when a worker dies")


class ContextWatch:
    """Checks the device after a dgvm task fails on ``worker``, and ends the worker
    process when the device context is gone (one per worker, in the store's plugin)."""

    def __init__(self, worker, backend):
        self.worker = worker
        self.backend = backend
        self.ended = False
        self._checking: set[asyncio.Task] = set()

    def task_failed(self, key) -> None:
        """Worker transition hook for a task that erred: O(1); the check runs as its own
        coroutine, its device wait in a thread."""
        if (self.ended or not self.backend.may_lose_context or not isinstance(key, str)
                or not key.startswith(messages.TASK_PREFIX)):
            return
        task = asyncio.ensure_future(self._check(key))
        self._checking.add(task)
        task.add_done_callback(self._checking.discard)

    async def _check(self, key: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            lost = await loop.run_in_executor(None, self.backend.context_lost)
        except Exception:  # noqa: BLE001  (a check that fails is a device that fails)
            lost = True
        if not lost or self.ended:
            return
        self.ended = True
        # No task starts here any more: one queued is stranded when the worker exits, and
        # runs again elsewhere where copies allow, rather than failing on a dead device.
        self.worker.status = Status.paused
        ts = self.worker.state.tasks.get(key)
        error = str(getattr(ts, "exception_text", "") or f"dgvm task {key} failed")
        logger.error("dgvm: task %s ended the %s context of worker %s; the worker process exits",
                     key, self.backend.name, self.worker.address)
        try:
            await asyncio.wait_for(
                messages.call(self.worker.scheduler, messages.CONTEXT_LOST,
                              worker=self.worker.address, key=key, error=error),
                NOTICE_WAIT)
        except Exception:  # noqa: BLE001  (the exit goes on: the device is gone either way)
            logger.warning("dgvm: could not tell the scheduler that task %s ended the device "
                           "context", key, exc_info=True)
        self._exit()

    def _exit(self) -> None:
        if self.worker.nanny is not None:
            # Nothing in this process can use the device any more, its own cleanup
            # included: end it, and the nanny starts a new one.
            logging.shutdown()
            os._exit(EXIT_CODE)
        asyncio.ensure_future(self.worker.close(nanny=False, reason="dgvm-device-context-ended"))
