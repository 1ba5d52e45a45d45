"""Device work that a task queued and left running when it returned.

A task that queues kernels may return without waiting for them when another dgvm task
is ready to run on its worker, or waits there only for it (``dgvm.worker.tasks``,
``DirectTasks.ready``): the steps between the two
tasks (about a millisecond, ``benchmarks/task_timeline.py``) then overlap the device's
work instead of leaving it idle. The last task of a run waits for the device, and so for
the work of every task before it: one stream runs it all in order.

Nothing on the worker can tell the difference: its later kernels, host copies and frees
run after the queued work on the same stream. A reader on another device can: a peer
copying a chunk through CUDA IPC. So an export first waits for the work left running
here (``wait``). A device fault in that work is found by the next wait, whose error names
the work left running since the one before.
"""

from __future__ import annotations

import collections
import threading

#: work named in an error: the last few tasks that left theirs running
NAMED = 4


class QueuedWork:
    """One worker's record of the device work its tasks left running.

    ``record()`` returns an event that completes once the work queued so far on the
    worker's stream has run (``.done``, ``.synchronize()``), or None for a device that
    runs synchronously (the cpu backend: nothing is ever left running there).
    """

    def __init__(self, record):
        self._record = record
        self._lock = threading.Lock()
        self._event = None  # the last task's event: later on the stream than all before
        self._named = collections.deque(maxlen=NAMED)
        self.left_running = 0  # tasks that returned without waiting (store stats)

    def leave(self, what: str) -> None:
        """The calling task returns with its work ``what`` queued, not waited for."""
        with self._lock:  # recorded and kept in one step: the kept event is the latest
            event = self._record()
            self.left_running += 1
            if event is not None:
                self._event = event
                self._named.append(what)

    def done(self) -> bool:
        """Has all work left running finished? (Does not wait.)"""
        event = self._event
        return event is None or event.done

    def wait(self) -> None:
        """Wait for the work left running so far (not for work queued after it)."""
        event = self._event  # read once: what is waited for is what is forgotten
        if event is not None:
            event.synchronize()
            self._forget(event)

    def synchronized(self, device_wait) -> None:
        """Run ``device_wait()``, a wait for everything queued on the device: then the
        work left running so far has run too (the backend's ``synchronize``)."""
        event = self._event
        device_wait()
        self._forget(event)

    def named(self) -> list[str]:
        """The last few tasks whose work is left running, oldest first."""
        with self._lock:
            return list(self._named)

    def _forget(self, event) -> None:
        with self._lock:
            # A task that left work after ``event`` was taken keeps it (and its name).
            if self._event is event:
                self._event = None
                self._named.clear()
