"""Short garbage-collection pauses in the processes dgvm runs its scheduler and workers in.

Every task a worker runs waits for the scheduler to hear that the one before it finished,
and each worker feeds its own GPU: a pause of either process's event loop is an idle gap
of as long on the GPUs. A full collection walks every object the process tracks, about
230,000 in a scheduler once Dask and dgvm are imported (170,000 in a worker): 100-150 ms
on the GPU machines, once or twice a minute in a loop of operations. Measured with CUDA
events around every kernel of a loop of chains at 40000² on two H200s: the devices' longest
idle gaps were the scheduler's full collections (``benchmarks/task_timeline.py`` prints
both).

The objects alive once the process is up (modules, classes, the server) live as long as
the process, so they are frozen out of every later collection, and the thresholds are
those Dask's own ``dask scheduler`` command sets (three times the interpreter's). Only in
processes that dgvm's preloads start in and that serve nothing else: never in a program's
own process (an in-process cluster), whose objects are the program's business.
"""

from __future__ import annotations

import gc

#: Dask's ``dask scheduler`` command multiplies the interpreter's thresholds by this
THRESHOLD_FACTOR = 3

_done = False  # a forked child inherits it: its thresholds are raised already


def shorten() -> None:
    """Freeze what this process holds now out of later collections; raise the thresholds
    (once per process)."""
    global _done
    if _done:
        return
    _done = True
    gc.collect()
    gc.freeze()
    g0, g1, g2 = gc.get_threshold()
    gc.set_threshold(g0 * THRESHOLD_FACTOR, g1 * THRESHOLD_FACTOR, g2 * THRESHOLD_FACTOR)
