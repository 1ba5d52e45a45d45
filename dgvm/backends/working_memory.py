"""An operation's working memory on a worker: the budget its temporaries must fit.

Placement leaves ``placement.headroom`` of each device's capacity free of chunks; the
temporaries of the operation running there (one at a time: the store's lock) live in it.
``working-memory`` (bytes; null: ``headroom`` x capacity) is that budget per worker, read
when the backend opens. On ``cuda`` the budget an operation sees is also capped by what the
device has free at that moment (others may use it).

A task body that runs engine operations enters ``operation(backend)``: for its length,
``budget()`` answers the worker's budget in this thread, ``need(nbytes, what)`` refuses
working memory beyond it (``WorkingMemoryExceeded``, a ``MemoryError``), and on ``cuda``
every CuPy allocation that finds the device full gives dgvm's cached chunk buffers and
CuPy's pool blocks back to the driver and tries once more. Operations whose temporaries
grow with a chunk work in slices of it (``slices``) sized to the budget; those that
cannot say what they need (``need``) before they take it. ``is_out_of_memory(e)`` tells
an exception from running out (CuPy's ``OutOfMemoryError``, a library's failed workspace
allocation, ``WorkingMemoryExceeded``), which the task body reports as
``dgvm.OutOfDeviceMemory`` naming the operation, the chunk and the worker.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading

_local = threading.local()

#: working memory an operation may assume when no task set a budget (on the caller)
UNBOUNDED = 1 << 62


class WorkingMemoryExceeded(MemoryError):
    """An operation needs more working memory than the worker's budget."""


def budget() -> int:
    """Bytes of working memory the operation running in this thread may use."""
    backend = getattr(_local, "backend", None)
    return UNBOUNDED if backend is None else backend.working_budget()


def need(nbytes: int, what: str) -> None:
    """Say that ``what`` takes ``nbytes`` of working memory at once; refused
    (``WorkingMemoryExceeded``) beyond the budget."""
    limit = budget()
    if nbytes > limit:
        raise WorkingMemoryExceeded(f"{what} needs {nbytes} bytes of working memory at once, "
                                    f"more than the budget of {limit} bytes")


@contextlib.contextmanager
def operation(backend):
    """The scope of a task's operations on ``backend`` in this thread (see the module)."""
    before = getattr(_local, "backend", None)
    _local.backend = backend
    try:
        with backend.retrying_allocations():
            yield
    finally:
        _local.backend = before


def is_out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` says that device (or budgeted) memory ran out."""
    if isinstance(e, MemoryError):  # CuPy's OutOfMemoryError is one
        return True
    text = f"{type(e).__name__} {e}"
    return any(s in text for s in ("cudaErrorMemoryAllocation", "ALLOC_FAILED", "out of memory"))


def slices(shape, bytes_per_element: int, limit: int | None = None):
    """Sub-blocks ``(lo, hi)`` (local to a block of ``shape``) covering it in C order,
    each of at most ``limit`` (default: ``budget()``) / ``bytes_per_element`` elements,
    but at least one element. One block (the whole) when it fits."""
    shape = tuple(int(s) for s in shape)
    limit = budget() if limit is None else limit
    most = max(1, limit // max(1, bytes_per_element))
    if math.prod(shape) <= most or not shape:
        yield (0,) * len(shape), shape
        return
    # The first axis whose trailing block fits: step along it, one index of those before.
    a = next(a for a in range(len(shape)) if math.prod(shape[a + 1:]) <= most)
    step = max(1, most // math.prod(shape[a + 1:]))
    for outer in itertools.product(*(range(s) for s in shape[:a])):
        for start in range(0, shape[a], step):
            stop = min(shape[a], start + step)
            lo = (*outer, start) + (0,) * (len(shape) - a - 1)
            hi = tuple(o + 1 for o in outer) + (stop,) + shape[a + 1:]
            yield lo, hi
