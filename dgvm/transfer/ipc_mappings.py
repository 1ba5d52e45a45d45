"""Peers' device buffers opened through IPC handles, kept open for the next copy.

Opening a CUDA IPC handle costs about a millisecond (the driver maps the peer's buffer
into this process), five times the copy of a 64 MiB chunk over NVLink; a fresh mapping
also makes the first copy slower. A chunk is fetched from the same home buffer again and
again (after every write that drops the replicas; a home writes in place), so the
receiver keeps its mappings, as UCX's IPC cache does.

A mapping must be closed before its holder frees the buffer (freeing first is undefined
behaviour in CUDA). So the holder never frees a buffer it exported without asking the
importers to ``forget`` it first (``backends.cuda``, ``ipc_retire.IpcRetirement``);
``forget`` waits for copies in progress. At most ``limit`` mappings are kept; the least
recently used unused one is closed beyond that.

The class takes the open and close functions, so its bookkeeping runs (and is tested)
without a GPU.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

Key = tuple  # (holder address, handle bytes)


class BufferGone(Exception):
    """The holder freed (or is freeing) the buffer a descriptor names: the chunk moved or
    was freed after it was exported. Ask the GVAT again, as for ``messages.MOVED``."""


@dataclass
class _Mapping:
    ptr: Any
    users: int = 0  # copies reading through it now
    forgotten: bool = False  # the holder asked: close when the last user is done


class ImportedMappings:
    """Mappings of peers' buffers, keyed by (holder address, IPC handle). Every open and
    close happens under one lock, so a ``forget`` that returns has closed the mapping
    (the holder frees the buffer right after); copies hold no lock while they run. A
    handle forgotten before it was opened (its descriptor was on the way) is refused
    afterwards. Holders hand out tokens (``ipc_exports``: the IPC handle and the export's
    serial number), so a new buffer that CUDA gives a freed one's handle is not refused."""

    FORGOTTEN_KEPT = 4096  # handles remembered as forgotten

    def __init__(self, open_handle: Callable[[bytes], Any], close: Callable[[Any], None],
                 limit: int = 64):
        self._open_handle = open_handle
        self._close = close
        self.limit = limit
        self._lock = threading.Condition()
        self._maps: OrderedDict[Key, _Mapping] = OrderedDict()  # least recently used first
        self._forgotten: OrderedDict[Key, None] = OrderedDict()
        self.opened = 0
        self.reused = 0

    def acquire(self, holder: str, handle: bytes):
        """The local pointer to the peer's buffer, opened now or kept from before; pair
        every call with ``release``. ``BufferGone`` if the holder frees it."""
        key = (holder, bytes(handle))
        with self._lock:
            m = self._maps.get(key)
            if key in self._forgotten or (m is not None and m.forgotten):
                raise BufferGone(f"a buffer of {holder} was freed after it was exported")
            if m is None:
                try:
                    ptr = self._open_handle(key[1])
                except Exception as e:  # its holder left, or freed it
                    raise BufferGone(f"a buffer of {holder} cannot be opened: {e}") from e
                self._close_over_limit(room_for=1)
                m = self._maps[key] = _Mapping(ptr)
                self.opened += 1
            else:
                self._maps.move_to_end(key)
                self.reused += 1
            m.users += 1
            return m.ptr

    def release(self, holder: str, handle: bytes) -> None:
        """A copy through ``acquire``'s pointer is done."""
        key = (holder, bytes(handle))
        with self._lock:
            m = self._maps[key]
            m.users -= 1
            if m.forgotten and not m.users:
                del self._maps[key]
                try:
                    self._close(m.ptr)
                finally:
                    self._lock.notify_all()  # a ``forget`` waits for this
            self._close_over_limit()

    def _close_over_limit(self, room_for: int = 0) -> None:
        # The least recently used mappings nobody reads now, beyond the limit.
        if len(self._maps) + room_for <= self.limit:
            return
        for key in list(self._maps):
            if len(self._maps) + room_for <= self.limit:
                break
            if not self._maps[key].users:
                self._close(self._maps.pop(key).ptr)

    def forget_now(self, holder: str, handles=None, timeout: float | None = None) -> int:
        """Close the mappings of ``handles`` (all of ``holder``'s when None) and refuse
        them from now on; one in use is closed by its last copy, and this waits for that
        (``TimeoutError`` after ``timeout`` seconds). Returns how many were open.
        Blocks: keep it off the event loop."""
        with self._lock:
            if handles is None:
                keys = [k for k in self._maps if k[0] == holder]
            else:
                keys = list(dict.fromkeys((holder, bytes(h)) for h in handles))
            for key in keys:
                self._forgotten[key] = None
                self._forgotten.move_to_end(key)
            while len(self._forgotten) > self.FORGOTTEN_KEPT:
                self._forgotten.popitem(last=False)
            busy, found = [], 0
            for key in keys:
                m = self._maps.get(key)
                if m is None:
                    continue
                found += 1
                m.forgotten = True
                if m.users:
                    busy.append((key, m))
                else:
                    del self._maps[key]
                    self._close(m.ptr)
            # The last copy through a busy one closes it (``release``).
            if not self._lock.wait_for(lambda: all(self._maps.get(k) is not m for k, m in busy), timeout):
                raise TimeoutError(f"copies from {holder}'s buffers still running after {timeout} s")
            return found

    async def forget(self, holder: str, handles=None, timeout: float | None = None) -> int:
        """``forget_now`` from the event loop (in a thread)."""
        return await asyncio.get_running_loop().run_in_executor(
            None, self.forget_now, holder, handles, timeout
        )

    def __len__(self) -> int:
        return len(self._maps)

    def counters(self) -> dict:
        """Mappings open now, opened in all, and copies that found theirs open."""
        return {"open": len(self._maps), "opened": self.opened, "reused": self.reused}
