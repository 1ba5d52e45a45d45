"""Processes started for the implicit cluster do not run the program again.

Dask starts the worker processes (and dgvm the scheduler's, ``dgvm.deploy.scheduler_process``)
by spawning, and a spawned process first runs the program's script (or module) again,
as ``__mp_main__``, so that the functions defined there can be found. A NumPy program
ported with ``import dgvm.array as np`` has no ``if __name__ == "__main__":`` guard, and
its first operation starts a cluster (``dgvm.array.creation``): each worker would run
the program again, and start a cluster of its own. dgvm's processes need nothing from
the program (tasks carry its functions by value, cloudpickle). So while the implicit
cluster starts a process, at its start and whenever a nanny restarts its worker,
``multiprocessing`` is shown a bare ``__main__`` to prepare the child from.

Only ``sys.modules["__main__"]`` changes, for those moments; the program's module
object is left as it is, so its code still sees its own ``__file__`` and globals.
Code that looks ``__main__`` up by name in that window (``pickle`` of a class defined
in the script; Dask then falls back to cloudpickle, which sends it by value) sees the
bare one.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types

from distributed import Nanny

_lock = threading.Lock()
_depth = 0  # windows open now: nannies restart concurrently, from the event loop
_program = None  # the program's __main__ while a window is open


@contextlib.contextmanager
def program_not_rerun():
    """Within it, a process spawned does not run the program's ``__main__`` again."""
    global _depth, _program
    with _lock:
        if _depth == 0:
            _program = sys.modules.get("__main__")
            sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__, __spec__ None
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _program is not None:
                    sys.modules["__main__"] = _program
                _program = None


class ProgramNotRerunNanny(Nanny):
    """A ``Nanny`` whose worker process, at start and at each restart, is spawned
    without running the program again (``program_not_rerun``)."""

    async def instantiate(self):
        with program_not_rerun():
            return await super().instantiate()
