"""A small terminal progress bar for long dgvm operations; quiet when not on a terminal."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: float, label: str, stream=None, width: int = 30):
        self.total = max(total, 1)
        self.label = label
        self.stream = stream or sys.stdout
        self.width = width
        self.done = 0.0
        self.t0 = time.perf_counter()
        self.live = getattr(self.stream, "isatty", lambda: False)()

    def update(self, amount: float = 1) -> None:
        self.done += amount
        if self.live:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * self.width)
            self.stream.write(f"\r{self.label:<12} [{bar:<{self.width}}] {frac:6.1%}")
            self.stream.flush()

    def close(self) -> None:
        elapsed = time.perf_counter() - self.t0
        if self.live:
            self.stream.write("\n")
        self.stream.write(f"{self.label}: done in {elapsed:.2f} s\n")
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        elif self.live:
            self.stream.write("\n")
