"""Compiled kernels, kept once per worker process.

A ``@dgvm.kernel`` or ``@dgvm.vectorize`` travels to the workers with every launch, and a
function defined in a script's ``__main__`` arrives as a new function object each time.
So compiled code is cached under the key the object was given when it was defined (it
travels with it), not under the function object: each worker compiles once.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

# A pure cache of compiled code, keyed by what it compiles, in the worker process: shared
# by every client's launches, so per process and not per client session.
_compiled: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def new_key(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex}"


def compiled_once(key: str, backend: str, build: Callable[[], Any]) -> Any:
    """The object ``build()`` made for ``(key, backend)`` in this process, built once."""
    fn = _compiled.get((key, backend))
    if fn is None:
        with _lock:
            fn = _compiled.get((key, backend))
            if fn is None:
                fn = _compiled[(key, backend)] = build()
    return fn
