"""Progress of long dgvm operations: a terminal bar, quiet when not on a terminal.

- ``Progress``: a bar drawn on a terminal (``stream.isatty()``), nothing otherwise; with
  ``summary`` it prints one closing line ("fill: done in 1.20 s") either way, as the demo's
  output does; ``transient`` erases the bar when done (benchmarks keep their tables clean).
- ``track(iterable, label)``: iterate with a bar.
- ``batches(items, label, nbytes)``: cut a large host transfer into a few batches with a
  bar, on a terminal only; elsewhere (or when small) one batch, so a program's behaviour
  does not change with where its output goes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sequence

# Host transfers smaller than this finish too fast for a bar to help.
BATCH_MIN_BYTES = 256 * 2**20


def on_terminal(stream=None) -> bool:
    stream = stream if stream is not None else sys.stdout
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """``total`` steps of ``label``; ``update(n)`` after each. Draws at most every
    ``interval`` seconds (and at the end)."""

    def __init__(self, total: float, label: str, stream=None, width: int = 30,
                 summary: bool = True, transient: bool = False, interval: float = 0.1):
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stdout
        self.width = width
        self.summary = summary
        self.transient = transient
        self.interval = interval
        self.done = 0.0
        self.t0 = time.perf_counter()
        self._drawn = 0.0  # when the bar was last drawn
        self._line = 0  # characters of the bar on screen
        self.live = on_terminal(self.stream)

    def update(self, amount: float = 1) -> None:
        self.done += amount
        if not self.live:
            return
        now = time.perf_counter()
        if now - self._drawn < self.interval and self.done < self.total:
            return
        self._drawn = now
        frac = min(self.done / self.total, 1.0)
        bar = "#" * int(frac * self.width)
        line = f"{self.label:<12} [{bar:<{self.width}}] {frac:6.1%} {now - self.t0:6.1f} s"
        self.stream.write("\r" + line)
        self.stream.flush()
        self._line = len(line)

    def _end_line(self) -> None:
        if self.live and self._line:
            self.stream.write("\r" + " " * self._line + "\r" if self.transient else "\n")
            self._line = 0

    def close(self) -> None:
        elapsed = time.perf_counter() - self.t0
        self._end_line()
        if self.summary:
            self.stream.write(f"{self.label}: done in {elapsed:.2f} s\n")
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            self._end_line()
            self.stream.flush()


def track(items: Iterable, label: str, total: int | None = None, **kwargs) -> Iterator:
    """Yield ``items`` one by one, with a bar (``Progress`` keywords; no summary line by
    default)."""
    if total is None:
        total = len(items) if hasattr(items, "__len__") else 0
    kwargs.setdefault("summary", False)
    with Progress(total, label, **kwargs) as bar:
        for item in items:
            yield item
            bar.update()


def batches(items: Sequence, label: str, nbytes: int, n: int = 20,
            min_bytes: int | None = None, stream=None) -> Iterator[list]:
    """``items`` (e.g. the pieces of a host write) in about ``n`` batches with a bar, when
    ``nbytes`` is at least ``min_bytes`` (``BATCH_MIN_BYTES``) and ``stream`` (stdout) is
    a terminal; otherwise all of them as one batch."""
    items = list(items)
    min_bytes = BATCH_MIN_BYTES if min_bytes is None else min_bytes
    if nbytes < min_bytes or len(items) < 2 or not on_terminal(stream):
        if items:
            yield items
        return
    step = -(-len(items) // n)
    for i in track(range(0, len(items), step), label, stream=stream, transient=True):
        yield items[i:i + step]
