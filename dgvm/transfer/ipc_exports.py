"""The holder's side of kept IPC mappings: which of its buffers peers have opened.

A receiver keeps a peer's buffer mapped for the next copy (``ipc_mappings``), and a CUDA
buffer must not be freed while another process has it mapped. So the backend asks here
before it frees a buffer: one never exported is freed at once; an exported one *retires*:
the worker asks every importer to forget it (``ChunkStorePlugin._retire``) and only then
drops the last reference. A retiring buffer is never handed out again. Reusing an
exported buffer for a new chunk of its size is fine: the importers' mappings stay valid,
and every copy is asked for by its descriptor.

No CUDA here (the backend passes the handle function), so the bookkeeping is tested on cpu.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class _Exported:
    buffer: Any  # kept alive here until every importer forgot it
    handle: bytes
    importers: set = field(default_factory=set)
    retiring: bool = False


class ExportedBuffers:
    def __init__(self, get_handle: Callable[[Any], bytes]):
        self._get_handle = get_handle
        # Exports run on the event loop beside the store's own thread: one lock, and
        # nothing freed under it (cudaFree waits for the device).
        self._lock = threading.Condition()
        self._exported: dict[int, _Exported] = {}  # buffer id -> export
        self._retiring: list[int] = []  # keys to ask the importers about
        self.on_retire: Callable[[], None] | None = None  # set by the worker

    def handle(self, key: int, buffer, importer: str | None,
               current: Callable[[], bool] = lambda: True) -> bytes | None:
        """The IPC handle of ``buffer`` (named ``key``, unique while it lives), noting that
        ``importer`` may keep it mapped; None if ``current()`` says the buffer no longer
        holds the chunk asked for, or it retires (it moved or was freed meanwhile)."""
        with self._lock:
            e = self._exported.get(key)
            if (e is not None and e.retiring) or not current():
                return None
            if e is None:
                e = self._exported[key] = _Exported(buffer, bytes(self._get_handle(buffer)))
            if importer is not None:
                e.importers.add(importer)
            return e.handle

    def exported(self, key: int) -> bool:
        return key in self._exported

    def retire(self, key: int) -> None:
        """The owner gave up buffer ``key``: free it once its importers forgot it."""
        with self._lock:
            e = self._exported.get(key)
            if e is None or e.retiring:
                return
            if not e.importers or self.on_retire is None:  # nobody to ask: free now
                drop = self._exported.pop(key)
            else:
                e.retiring, drop = True, None
                self._retiring.append(key)
        if drop is None:
            self.on_retire()
        del drop  # the last reference, outside the lock

    def take_retiring(self) -> tuple[dict[str, list[bytes]], list[int]]:
        """({importer: handles to forget}, keys) of the buffers retiring now."""
        with self._lock:
            keys, self._retiring = self._retiring, []
            ask: dict[str, list[bytes]] = {}
            for k in keys:
                for imp in self._exported[k].importers:
                    ask.setdefault(imp, []).append(self._exported[k].handle)
            return ask, keys

    def retry(self, keys) -> None:
        """Some importers did not answer: ask again later."""
        with self._lock:
            self._retiring.extend(k for k in keys if k in self._exported)

    def peer_gone(self, importer: str) -> None:
        """``importer`` left the cluster: its mappings went with its process."""
        with self._lock:
            for e in self._exported.values():
                e.importers.discard(importer)

    def retired(self, keys) -> None:
        """Importers forgot ``keys``: drop the buffers (the backend's last reference)."""
        with self._lock:
            dropped = [self._exported.pop(k, None) for k in keys]
            self._lock.notify_all()
        dropped.clear()  # cudaFree, outside the lock

    def wait_retired(self, timeout: float) -> bool:
        """Wait until no buffer is retiring (an allocation that needs their memory);
        False after ``timeout`` seconds. Never from the thread that runs ``retired``."""
        with self._lock:
            return self._lock.wait_for(
                lambda: not any(e.retiring for e in self._exported.values()), timeout
            )

    def importers(self) -> set[str]:
        """Every worker that may keep one of these buffers mapped."""
        with self._lock:
            return set().union(*(e.importers for e in self._exported.values()))

    def clear(self) -> None:
        with self._lock:
            dropped = list(self._exported.values())
            self._exported.clear()
            self._retiring.clear()
            self._lock.notify_all()
        dropped.clear()

    def __len__(self) -> int:
        return len(self._exported)

    def counters(self) -> dict:
        """Buffers exported now, and those waiting for their importers to forget them."""
        with self._lock:
            retiring = sum(e.retiring for e in self._exported.values())
        return {"exported": len(self._exported), "retiring": retiring}
