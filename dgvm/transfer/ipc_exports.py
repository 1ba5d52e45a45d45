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


class ExportedBuffers:
    def __init__(self, get_handle: Callable[[Any], bytes]):
        self._get_handle = get_handle
        self._lock = threading.Lock()  # exports run beside the store's own operations
        self._exported: dict[int, _Exported] = {}  # buffer id -> export
        self._retiring: list[int] = []
        self.on_retire: Callable[[], None] | None = None  # set by the worker

    def handle(self, key: int, buffer, importer: str | None) -> bytes:
        """The IPC handle of ``buffer`` (named ``key``, unique while it lives), noting that
        ``importer`` may keep it mapped."""
        with self._lock:
            e = self._exported.get(key)
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
            if e is None:
                return
            if not e.importers or self.on_retire is None:  # nobody to ask: free now
                del self._exported[key]
                return
            self._retiring.append(key)
        self.on_retire()

    def take_retiring(self) -> tuple[dict[str, list[bytes]], list[int]]:
        """({importer: handles to forget}, keys) of the buffers retiring now."""
        with self._lock:
            keys, self._retiring = self._retiring, []
            ask: dict[str, list[bytes]] = {}
            for k in keys:
                e = self._exported[k]
                for imp in e.importers:
                    ask.setdefault(imp, []).append(e.handle)
            return ask, keys

    def retired(self, keys) -> None:
        """Importers forgot ``keys``: drop the buffers (the backend's last reference)."""
        with self._lock:
            for k in keys:
                self._exported.pop(k, None)

    def clear(self) -> None:
        with self._lock:
            self._exported.clear()
            self._retiring.clear()

    def __len__(self) -> int:
        return len(self._exported)

    def counters(self) -> dict:
        """Buffers exported now, and those waiting for their importers to forget them."""
        return {"exported": len(self._exported), "retiring": len(self._retiring)}
