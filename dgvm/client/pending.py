"""The tasks that still use an allocation's memory: what a new task must follow.

Each array keeps the futures of the tasks that last wrote it and of later tasks that read
it. ``dgvm.client.dispatch`` orders every new task after them (``dgvm.client.ordering``)
and records the new tasks here.
"""

from __future__ import annotations

from dgvm.client.failures import told


def unfinished(futures) -> list:
    """The futures whose tasks have not finished. A task ordered after a finished one
    needs no dependency on it (a dependency on a task of another worker would even fetch
    its result there first), and reader lists stay short in long loops. Failed tasks stay
    until their error was raised (``dgvm.client.failures``): it belongs to whoever waits
    next, and the tasks that follow one never run."""
    return [f for f in futures if f.status != "finished" and not told(f)]


def still_reading(futures) -> list:
    """The readers a later writer must wait for: those not finished. A reader that failed
    reads no more, and its error belongs to its own output, not to the array it read."""
    return [f for f in futures if f.status not in ("finished", "error", "cancelled")]


class Pending:
    """Futures of the tasks that write an array and of later tasks that read it."""

    __slots__ = ("writes", "reads")

    def __init__(self):
        self.writes: list = []
        self.reads: list = []

    def writers(self) -> list:
        """The writers a new task must follow (unfinished or failed)."""
        return unfinished(self.writes)

    def readers(self) -> list:
        """The readers a new writer must wait for."""
        return still_reading(self.reads)

    def all(self) -> list:
        return self.writes + self.reads

    def wrote(self, futures, writes=(), reads=()) -> None:
        """``futures`` are the array's new writers; the readers before them are done with
        it. (A write of some chunks keeps the earlier ``writes`` and ``reads`` that may
        have touched the others.)"""
        self.writes, self.reads = list(futures) + list(writes), list(reads)

    def read_by(self, futures) -> None:
        """``futures`` read the array: a later write waits for them."""
        self.reads = still_reading(self.reads) + list(futures)

    def take(self) -> list:
        """Forget every task (the memory is being given back); return them."""
        futures = self.writes + self.reads
        self.writes, self.reads = [], []
        return futures
