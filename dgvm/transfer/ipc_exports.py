"""The holder's side of kept IPC mappings: which of its buffers peers have opened.

A receiver keeps a peer's buffer mapped for the next copy (``ipc_mappings``), and a CUDA
buffer must not be freed while another process has it mapped. So the backend asks here
before it frees a buffer: one never exported is freed at once; an exported one *retires*:
the worker asks every importer to forget it (``ipc_retire.IpcRetirement``) and only then
drops the last reference. A retiring buffer is never handed out again. Reusing an
exported buffer for a new chunk of its size is fine: the importers' mappings stay valid,
and every copy is asked for by its descriptor.

An export is named by a *token*: the buffer's IPC handle and the serial number of its
export. CUDA may give a new buffer at a freed one's address the same handle (seen with
small chunks), and importers refuse what they were told to forget; never the same token.

No CUDA here (the backend passes the handle function), so the bookkeeping is tested on cpu.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable


SERIAL_BYTES = 8  # the export's serial number, after the IPC handle in a token


def handle_of(token: bytes) -> bytes:
    """The IPC handle an export's token names (what the importer opens)."""
    return token[:-SERIAL_BYTES]


@dataclass
class _Exported:
    buffer: Any  # kept alive here until every importer forgot it
    token: bytes  # the IPC handle + this export's serial number
    nbytes: int
    importers: set = field(default_factory=set)


class ExportedBuffers:
    def __init__(self, get_handle: Callable[[Any], bytes]):
        self._get_handle = get_handle
        # Exports run on the event loop beside the store's own thread: one lock, and
        # nothing freed under it (cudaFree waits for the device).
        self._lock = threading.Condition()
        self._exported: dict[int, _Exported] = {}  # buffer id -> export
        self._retiring: set[int] = set()  # keys given up, kept until their importers forgot them
        self._to_ask: list[int] = []  # of those, the keys to ask the importers about
        self._retiring_bytes = 0
        self._gone: set[str] = set()  # importers that left: never exported to again
        self._serials = itertools.count(1)
        self.on_retire: Callable[[], None] | None = None  # set by the worker

    def handle(self, key: int, buffer, nbytes: int, importer: str | None,
               current: Callable[[], bool] = lambda: True) -> bytes | None:
        """The token (IPC handle and export serial) of ``buffer`` (named ``key``, unique
        while it lives), noting that ``importer`` may keep it mapped; None if ``current()``
        says the buffer no longer holds the chunk asked for, or it retires (it moved or was
        freed meanwhile), or the importer left the cluster."""
        with self._lock:
            e = self._exported.get(key)
            if key in self._retiring or importer in self._gone or not current():
                return None
            if e is None:
                token = bytes(self._get_handle(buffer)) + next(self._serials).to_bytes(SERIAL_BYTES, "little")
                e = self._exported[key] = _Exported(buffer, token, nbytes)
            if importer is not None:
                e.importers.add(importer)
            return e.token

    def exported(self, key: int) -> bool:
        return key in self._exported

    def retire(self, key: int) -> None:
        """The owner gave up buffer ``key``: free it once its importers forgot it."""
        with self._lock:
            e = self._exported.get(key)
            if e is None or key in self._retiring:
                return
            if not e.importers or self.on_retire is None:  # nobody to ask: free now
                drop = self._exported.pop(key)
            else:
                drop = None
                self._retiring.add(key)
                self._retiring_bytes += e.nbytes
                self._to_ask.append(key)
        if drop is None:  # a run asks about every buffer retiring by then (runs merge)
            self.on_retire()
        del drop  # the last reference, outside the lock

    def take_retiring(self) -> tuple[dict[str, list[bytes]], dict[int, set]]:
        """({importer: handles to forget}, {key: its importers}) of the buffers retiring now."""
        with self._lock:
            keys, self._to_ask = self._to_ask, []
            who = {k: set(self._exported[k].importers) for k in keys}
            return self._by_importer(self._exported[k] for k in keys), who

    @staticmethod
    def _by_importer(entries) -> dict[str, list[bytes]]:
        out: dict[str, list[bytes]] = {}
        for e in entries:
            for imp in e.importers:
                out.setdefault(imp, []).append(e.token)
        return out

    def retry(self, keys) -> None:
        """Some importers did not answer: ask again later."""
        with self._lock:
            self._to_ask.extend(k for k in keys if k in self._exported)

    def peer_gone(self, importer: str) -> None:
        """``importer`` left the cluster: its mappings went with its process."""
        with self._lock:
            self._gone.add(importer)
            for e in self._exported.values():
                e.importers.discard(importer)

    def retired(self, keys) -> None:
        """Importers forgot ``keys``: free the buffers, then say so (``wait_retired``)."""
        with self._lock:
            entries = [self._exported[k] for k in keys if k in self._exported]
        for e in entries:
            e.buffer = None  # cudaFree, outside the lock, before anyone is told
        with self._lock:
            for k in keys:
                e = self._exported.pop(k, None)
                if e is not None and k in self._retiring:
                    self._retiring.discard(k)
                    self._retiring_bytes -= e.nbytes
            self._lock.notify_all()

    def any_retiring(self) -> bool:
        """Whether some buffer waits for its importers (a lock-free glance)."""
        return bool(self._retiring)

    def retiring_bytes(self) -> int:
        """Bytes that come back once the importers answer (memory about to be free)."""
        return self._retiring_bytes

    def wait_retired(self, timeout: float) -> bool:
        """Wait until the buffers retiring now are freed (an allocation needs their
        memory); False after ``timeout`` seconds. Never from the event loop."""
        with self._lock:
            keys = list(self._retiring)
            return self._lock.wait_for(lambda: not any(k in self._exported for k in keys), timeout)

    def importers(self) -> dict[str, list[bytes]]:
        """Every worker that may keep one of these buffers mapped, with their handles."""
        with self._lock:
            return self._by_importer(self._exported.values())

    def clear(self) -> None:
        with self._lock:
            dropped = list(self._exported.values())
            self._exported.clear()
            self._retiring.clear()
            self._to_ask.clear()
            self._retiring_bytes = 0
            self._lock.notify_all()
        dropped.clear()

    def __len__(self) -> int:
        return len(self._exported)

    def counters(self) -> dict:
        """Buffers exported now, and those waiting for their importers to forget them."""
        return {"exported": len(self._exported), "retiring": len(self._retiring)}
