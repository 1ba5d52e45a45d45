"""Kept IPC mappings: the receiver's cache (``ipc_mappings``) and the holder's record of
what peers opened (``ipc_exports``). Their bookkeeping runs here with stand-in open and
close functions; the GPU test in test_migration.py runs them with CUDA IPC."""

import asyncio
import threading
import time

import pytest

from dgvm.transfer.ipc_exports import ExportedBuffers, handle_of
from dgvm.transfer.ipc_mappings import BufferGone, ImportedMappings


class Driver:
    """Stands in for cudaIpcOpenMemHandle / cudaIpcCloseMemHandle: counts what is open."""

    def __init__(self):
        self.open = {}  # pointer -> handle
        self.next = 1

    def open_handle(self, handle):
        ptr, self.next = self.next, self.next + 1
        self.open[ptr] = handle
        return ptr

    def close(self, ptr):
        del self.open[ptr]


def test_second_copy_reuses_the_mapping_and_limit_closes_the_oldest_unused():
    d = Driver()
    maps = ImportedMappings(d.open_handle, d.close, limit=2)
    p = maps.acquire("w1", b"a")
    maps.release("w1", b"a")
    assert maps.acquire("w1", b"a") == p  # kept
    maps.release("w1", b"a")
    assert maps.counters() == {"open": 1, "opened": 1, "reused": 1}
    maps.acquire("w2", b"a")  # same bytes from another holder: another buffer
    maps.acquire("w1", b"b")  # a third mapping: the oldest unused one closes
    assert sorted(d.open.values()) == [b"a", b"b"] and p not in d.open
    assert maps.acquire("w1", b"a") != p  # opened again
    assert len(maps) == len(d.open) == 3  # beyond the limit: none closed under a copy
    maps.release("w2", b"a")  # unused and the oldest: closed
    maps.release("w1", b"b")
    maps.release("w1", b"a")
    assert len(maps) == len(d.open) == 2
    assert maps.counters() == {"open": 2, "opened": 4, "reused": 1}


def test_forget_closes_at_once_or_after_the_copy_in_progress():
    d = Driver()
    maps = ImportedMappings(d.open_handle, d.close)
    maps.acquire("w1", b"idle")
    maps.release("w1", b"idle")
    busy = maps.acquire("w1", b"busy")
    maps.acquire("w2", b"other")
    maps.release("w2", b"other")
    done = []

    def forget():
        done.append(maps.forget_now("w1", [b"idle", b"busy", b"busy", b"sent"], timeout=10))

    t = threading.Thread(target=forget, daemon=True)
    t.start()
    time.sleep(0.2)
    assert not done and busy in d.open  # waits for the copy through it
    with pytest.raises(BufferGone):
        maps.acquire("w1", b"busy")
    maps.release("w1", b"busy")
    t.join(5)
    assert done == [2]
    assert set(d.open.values()) == {b"other"}
    # A descriptor on its way when its buffer was forgotten: refused, never opened.
    with pytest.raises(BufferGone):
        maps.acquire("w1", b"sent")
    assert asyncio.run(maps.forget("w2")) == 1  # every buffer of a holder
    assert not d.open and len(maps) == 0


def test_forget_gives_up_after_its_timeout_while_a_copy_runs():
    d = Driver()
    maps = ImportedMappings(d.open_handle, d.close)
    maps.acquire("w1", b"busy")
    with pytest.raises(TimeoutError, match="still running"):
        maps.forget_now("w1", [b"busy"], timeout=0.1)
    maps.release("w1", b"busy")  # the copy ends: closed then
    assert not d.open


def test_holder_frees_unopened_buffers_at_once_and_opened_ones_after_asking():
    exports = ExportedBuffers(lambda buf: b"handle-" + buf)
    alive = {1: b"one", 2: b"two", 3: b"three"}  # key -> buffer (held by the owner)
    asked = []
    exports.on_retire = lambda: asked.append(True)
    one = exports.handle(1, alive[1], 100, "w2")  # a token: the handle and the export's serial
    assert handle_of(one) == b"handle-one"
    assert exports.handle(1, alive[1], 100, "w3") == one
    exports.handle(2, alive[2], 100, None)  # exported, importer unknown: nobody to ask
    exports.retire(2)
    exports.retire(3)  # never exported: nothing to do
    assert not exports.exported(2) and not asked
    exports.retire(1)
    exports.retire(1)  # given up twice (two paths dropping caches): retires once
    assert asked == [True] and exports.exported(1)  # kept until the importers forgot it
    assert exports.retiring_bytes() == 100  # counted as memory about to be free
    assert exports.handle(1, alive[1], 100, "w4") is None  # retiring: never handed out again
    assert exports.importers() == {"w2": [one], "w3": [one]}
    ask, who = exports.take_retiring()
    assert ask == {"w2": [one], "w3": [one]} and who == {1: {"w2", "w3"}}
    assert exports.take_retiring() == ({}, {})
    exports.retry(list(who))  # w3 did not answer: asked again later
    exports.peer_gone("w3")  # ... until it left the cluster
    assert exports.take_retiring() == ({"w2": [one]}, {1: {"w2"}})
    assert exports.counters() == {"exported": 1, "retiring": 1}
    assert not exports.wait_retired(0.05)
    exports.retired([1])
    assert len(exports) == 0 and exports.wait_retired(0.05) and exports.retiring_bytes() == 0
    assert exports.handle(3, alive[3], 100, "w3") is None  # w3 left: nothing for it


def test_an_export_racing_a_release_is_moved_or_asked_to_forget():
    exports = ExportedBuffers(lambda buf: b"h")
    exports.on_retire = lambda: None
    # Released before the export looked again under the lock: the chunk moved.
    assert exports.handle(7, b"buf", 8, "w2", current=lambda: False) is None
    assert len(exports) == 0  # nothing kept alive for it
    # Exported first: the release that follows retires it and asks w2.
    token = exports.handle(7, b"buf", 8, "w2", current=lambda: True)
    assert handle_of(token) == b"h"
    exports.retire(7)
    assert exports.take_retiring() == ({"w2": [token]}, {7: {"w2"}})


def test_a_handle_that_cannot_be_opened_is_gone():
    def refuse(handle):
        raise OSError("invalid resource handle")

    maps = ImportedMappings(refuse, lambda ptr: None)
    with pytest.raises(BufferGone, match="cannot be opened"):
        maps.acquire("w1", b"h")
    assert len(maps) == 0


def test_a_new_buffer_given_a_freed_ones_handle_is_not_refused():
    """CUDA may give a new buffer at a freed one's address the same IPC handle (seen with
    small chunks). The importer refuses the old export after forgetting it, not the new."""
    d = Driver()
    maps = ImportedMappings(lambda token: d.open_handle(handle_of(token)), d.close)
    exports = ExportedBuffers(lambda buf: b"same handle")
    exports.on_retire = lambda: None
    old = exports.handle(1, b"old buffer", 8, "w2")
    maps.acquire("w1", old)
    maps.release("w1", old)
    exports.retire(1)
    ask, who = exports.take_retiring()
    maps.forget_now("w1", ask["w2"], timeout=1)  # w2 closes its mapping; w1 frees
    exports.retired(list(who))
    new = exports.handle(1, b"new buffer", 8, "w2")  # the same address and handle
    assert handle_of(new) == handle_of(old) and new != old
    maps.acquire("w1", new)  # opened: a forgotten handle is refused only as that export
    maps.release("w1", new)
    assert list(d.open.values()) == [b"same handle"]
    with pytest.raises(BufferGone):
        maps.acquire("w1", old)
