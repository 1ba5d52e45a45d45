"""A short thread switch interval in the program's process, where Dask's client sends dgvm's work.

A program connected to dgvm runs two threads that take turns on the interpreter lock: its
own, which builds and submits operations, and the client's event-loop thread, which sends
them to the scheduler and hears of their results. A loop of operations runs ahead of the
GPUs, so the program's thread is busy the whole time it submits. Every system call of the
loop thread (a socket read or write, a wake-up, a nanny's reads of ``/proc``) gives the
lock up, and getting it back from a busy thread takes the interpreter's switch interval,
5 ms: an iteration of the loop with a few such calls stalls for tens of milliseconds while
messages wait in the client, and every GPU then waits for its next task.

Measured on two H200s with 200 chains ``((2x + 1) x - 3) / (x + 2)`` at 40000² run back
to back (``benchmarks/task_timeline.py --scheduler-process --k 200``, CUDA events around
the tasks' work): with 5 ms the client's loop stalled for up to 40 ms at a time while the
program submitted, and the GPUs sat idle up to 81 ms at once and were busy 84-89% of the
loop; with 1 ms 86-87%; with 200 µs 95-96%; with 50 µs 97%, and no stall over 10 ms.

``dgvm.dispatch.switch-interval`` (default ``50us``; null leaves the interpreter's) is set
by ``dgvm.connect``. It is a setting of the whole process: a program with one busy thread
never switches, so nothing changes for it; threads that all compute in Python take
shorter turns. Not in worker processes: their task thread waits for the device with the
lock released, and the same setting there measured no better.
"""

from __future__ import annotations

import sys

from dgvm import config


def interval() -> float | None:
    """The configured interval in seconds, or None to leave the interpreter's."""
    seconds = config.get_seconds("dispatch.switch-interval")
    # Rounded to the interpreter's microseconds (50us parses to 49.999... us, which it
    # would truncate to 49), and at least one: it refuses 0.
    return None if seconds is None else max(round(seconds, 6), 1e-6)


def shorten() -> None:
    """Set this process's switch interval to the configured one (if any)."""
    seconds = interval()
    if seconds is not None:
        sys.setswitchinterval(seconds)
