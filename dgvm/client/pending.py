"""The tasks that still use an allocation's memory: what a new task must follow.

Each array keeps the futures of the tasks that last wrote it and of later tasks that read
it. ``dgvm.client.dispatch`` orders every new task after them (``dgvm.client.ordering``)
and records the new tasks here.
"""

from __future__ import annotations

from dgvm.client.failures import FAILED, behind, told


def unfinished(futures) -> list:
    """The futures whose tasks have not finished. A task ordered after a finished one
    needs no dependency on it (a dependency on a task of another worker would even fetch
    its result there first), and reader lists stay short in long loops. Failed tasks stay
    until their error was raised (``dgvm.client.failures``): it belongs to whoever waits
    next, and the tasks that follow one never run. A failed task that ended before the
    tasks it followed stands for them until they end (``failures.behind``)."""
    out = []
    for f in futures:
        if f.status == "finished":
            continue
        if f.status in FAILED:
            if not told(f):
                out.append(f)
            out += behind(f)
        else:
            out.append(f)
    return out


def still_reading(futures) -> list:
    """The readers a later writer must wait for: those not finished. A reader that failed
    reads no more, and its error belongs to its own output, not to the array it read;
    it stands for the tasks it followed that have not ended (``failures.behind``)."""
    out = []
    for f in futures:
        if f.status in FAILED:
            out += behind(f)
        elif f.status != "finished":
            out.append(f)
    return out


class Pending:
    """Futures of the tasks that write an array and of later tasks that read it."""

    __slots__ = ("writes", "reads", "last")

    def __init__(self):
        self.writes: list = []
        self.reads: list = []
        # chunk index -> key of the last task given it to write (``TaskChunks.wrote``);
        # emptied by a write whose chunks are not known
        self.last: dict = {}

    def writers(self) -> list:
        """The writers a new task must follow (unfinished or failed)."""
        return unfinished(self.writes)

    def readers(self) -> list:
        """The readers a new writer must wait for."""
        return still_reading(self.reads)

    def all(self) -> list:
        """Every task that may still use the array's memory (and failed ones)."""
        futures = self.writes + self.reads
        return futures + [d for f in futures for d in behind(f)]

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
        futures = self.all()
        self.writes, self.reads = [], []
        return futures
