"""Timing shared by the benchmarks: the median of repeated runs after a warm-up."""

from __future__ import annotations

import statistics
import sys
import time


def median_time(fn, reps: int, label: str | None = None) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after one warm-up call (it compiles and
    fills caches); with ``label``, a progress bar on a terminal."""
    fn()
    runs = range(reps)
    if label is not None:
        from dgvm.progress import track

        runs = track(runs, label, stream=sys.stderr, transient=True)
    times = []
    for _ in runs:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
