"""Pieces pushed by their chunk's home to a worker whose next task reads them.

A task that reads a few rows of a chunk held by another worker (a stencil's halo rows,
``Access._piece``) asks the chunk's home for their bytes: a round trip on the path of
every step, while both workers run their own host work. Instead, the home remembers which
bytes each worker read of its chunks (``remember``, on each such request), and sends a
worker those bytes when they are about to be read there again:

- a task that follows one of this worker's tasks, and that its client sends only once
  that one ended (the caller orders it), is named to this worker with that task
  (``push_to`` in its message, or a ``push`` message for a task sent before): when that
  task ends, the pieces that worker read of the chunks it wrote go there at once, as it
  answers its client (``after_task``);
- a worker whose task asks when this one's ended (``dgvm.dispatch.peers``) gets them with
  the answer (``for_reader``).

Nothing is pushed that no task waits for: a chunk written again and again that no task of
another worker reads costs nothing.

A task takes pushed bytes only when they are the ones it must read. Its client names the
tasks of other workers it follows that were the last given some chunks to write (no task
submitted since wrote them), with those chunks and the worker each ran on (``fresh``:
``dgvm.client.ordering.TaskChunks.last_writers``; none if a task it follows has writes
not recorded). Bytes of such a chunk tagged with that task, from that worker, are the
chunk as that task left it: a later write to it is by a task submitted after this one,
which follows it as it reads the chunk. The bytes were read after the task's write ended
on the device (``ChunkStore.last_write``); a chunk no longer at home there, or being
moved away, is not pushed; a worker forgets what a worker that left pushed. Anything
else (no push yet, an older one, a tag the task does not follow) and the task asks the
home. A piece taken is no longer kept.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading

from dgvm import config
from dgvm.protocol import messages
from dgvm.transfer.fetch import unwrap

logger = logging.getLogger("dgvm.worker")

REMEMBERED = 1024  # pieces read by other workers this worker remembers (readers and spans)
PIECE_BYTES = 4 << 20  # a larger piece is not pushed
RECEIVED = 1024  # pushed pieces a reader keeps at most (the oldest dropped first) ...
RECEIVED_BYTES = 64 << 20  # ... and bytes of them (a piece taken is dropped)


def enabled() -> bool:
    """Whether pieces are pushed (``dgvm.transfer.push-pieces``)."""
    return bool(config.get("transfer.push-pieces"))


class Pushes:
    """One worker's pushed pieces: those it pushes as a home and those pushed to it."""

    def __init__(self, worker, plugin):
        self.worker = worker
        self.plugin = plugin  # its ``export``, the same read a reader's request gets
        # As a home: (alloc id, chunk index) -> {(start, stop, reader)} read by other
        # workers, the chunk read last at the end
        self.read_by: "collections.OrderedDict[tuple, set]" = collections.OrderedDict()
        self._remembered = 0
        # As a reader: (alloc id, index, start, stop) -> Received
        self.received: "collections.OrderedDict[tuple, Received]" = collections.OrderedDict()
        self._received_bytes = 0
        self._lock = threading.Lock()  # (received: pushes on the loop, reads in task threads)
        self.sent = 0  # pieces sent
        self.recent: "collections.deque" = collections.deque(maxlen=256)  # (task key, reader) pushed lately

    # -- as a home (on the event loop) -------------------------------------------------------

    def remember(self, alloc_id: int, index: int, span, reader: str) -> None:
        """``reader`` asked for bytes ``span`` of home chunk ``index``: its tasks may read
        them again after the next write. (Past ``REMEMBERED`` pieces, those of the chunks
        read longest ago are forgotten.)"""
        if reader == self.worker.address or int(span[1]) - int(span[0]) > PIECE_BYTES or not enabled():
            return
        chunk = (alloc_id, index)
        readers = self.read_by.get(chunk)
        if readers is None:
            readers = self.read_by[chunk] = set()
        else:
            self.read_by.move_to_end(chunk)
        entry = (int(span[0]), int(span[1]), reader)
        if entry not in readers:
            readers.add(entry)
            self._remembered += 1
        while self._remembered > REMEMBERED:
            self._remembered -= len(self.read_by.popitem(last=False)[1])

    def _forget_entry(self, alloc_id: int, index: int, entry: tuple) -> None:
        readers = self.read_by.get((alloc_id, index))
        if readers is None or entry not in readers:
            return
        readers.discard(entry)
        self._remembered -= 1
        if not readers:
            del self.read_by[(alloc_id, index)]

    def forget(self, alloc_id: int) -> None:
        """Allocation ``alloc_id`` was freed: nothing of it is pushed any more, nor kept."""
        for chunk in [c for c in self.read_by if c[0] == alloc_id]:
            self._remembered -= len(self.read_by.pop(chunk))
        with self._lock:
            for piece in [p for p in self.received if p[0] == alloc_id]:
                self._received_bytes -= self.received.pop(piece).nbytes

    def peer_left(self, worker: str) -> None:
        """The worker at ``worker`` left: nothing is pushed to it, and nothing it pushed is
        taken (a worker that registers at its address later is another)."""
        for chunk, readers in list(self.read_by.items()):
            gone = {e for e in readers if e[2] == worker}
            if gone:
                readers -= gone
                self._remembered -= len(gone)
                if not readers:
                    del self.read_by[chunk]
        with self._lock:
            for piece in [p for p, got in self.received.items() if got.source == worker]:
                self._received_bytes -= self.received.pop(piece).nbytes

    def after_task(self, key: str, wrote, readers: dict) -> None:
        """Task ``key`` finished here, having written chunks ``wrote`` ((alloc id,
        indices) each) in place: send each worker of ``readers`` (-> the chunk indices
        its task reads as ``key`` left them) the pieces it read of those (not awaited)."""
        if wrote and self.read_by:
            for reader, chunks in readers.items():
                asyncio.ensure_future(self._push(key, wrote, chunks, reader))

    async def _push(self, key: str, wrote, chunks, reader: str) -> None:
        try:
            pieces = await self.for_reader(reader, [(key, wrote, chunks)])
            if pieces:
                self.recent.append((key, reader))
                await messages.call(self.worker.rpc(reader), messages.PUSHED, pieces=pieces)
                self.sent += len(pieces)
        except Exception:  # noqa: BLE001  (the reader left: it asks, if it reads at all)
            logger.debug("dgvm: pushing what task %s wrote to %s", key, reader, exc_info=True)

    async def for_reader(self, reader: str, tasks) -> list:
        """The pieces ``reader`` read of what ``tasks`` ((key, [(alloc id, chunk indices)]
        it wrote, the indices among them named for ``reader``) each, ended here) wrote,
        read now, as ``pushed`` takes them."""
        out = []
        for key, wrote, named in tasks:
            for alloc_id, indices in wrote:
                for index in set(indices).intersection(named):
                    for entry in [e for e in self.read_by.get((alloc_id, index), ()) if e[2] == reader]:
                        try:
                            desc, = await self.plugin.read_exports(alloc_id, [index], "comm", reader, list(entry[:2]))
                            desc = messages.decode(desc)
                        except Exception:  # noqa: BLE001  (freed meanwhile: the reader asks)
                            desc = messages.MOVED
                        if desc is messages.MOVED or desc.get("leaving"):  # not (only) here any more
                            self._forget_entry(alloc_id, index, entry)
                            continue
                        out.append({"alloc_id": alloc_id, "index": index, "span": list(entry[:2]),
                                    "key": key, "source": self.worker.address, "desc": desc})
        return out

    # -- as a reader ------------------------------------------------------------------------

    def pushed(self, pieces: list) -> int:
        """RPC handler (``messages.PUSHED``), and the pieces an answer of ``ended_here``
        brings: each the bytes ``span`` of chunk ``index`` of ``alloc_id`` as task ``key``
        left them at ``source``, its home. Kept (the last of each piece) for the tasks
        here that read them."""
        if not enabled():
            return 0
        with self._lock:
            for p in pieces:
                piece = (int(p["alloc_id"]), int(p["index"]), int(p["span"][0]), int(p["span"][1]))
                old = self.received.pop(piece, None)
                if old is not None:
                    self._received_bytes -= old.nbytes
                got = self.received[piece] = Received(unwrap(p["desc"]), str(p["key"]), str(p["source"]),
                                                      piece[3] - piece[2])
                self._received_bytes += got.nbytes
            while len(self.received) > RECEIVED or self._received_bytes > RECEIVED_BYTES:
                self._received_bytes -= self.received.popitem(last=False)[1].nbytes
        return len(pieces)

    def take(self, alloc_id: int, index: int, start: int, stop: int, fresh: dict):
        """The pushed descriptor of bytes ``[start, stop)`` of that chunk if a task
        following ``fresh`` (task key -> (worker, alloc id, chunk indices) of the chunks
        it follows the last writer of) must read exactly those bytes, else None. Taken,
        they are no longer kept (the task keeps what it read)."""
        with self._lock:
            piece = (alloc_id, index, start, stop)
            got = self.received.get(piece)
            if got is None or not _sole(got, alloc_id, index, fresh):
                return None
            del self.received[piece]
            self._received_bytes -= got.nbytes
            return got.desc

    def usable(self, alloc_id: int, index: int, start: int, stop: int, fresh: dict) -> bool:
        """Would ``take`` give the bytes now?"""
        with self._lock:
            got = self.received.get((alloc_id, index, start, stop))
            return got is not None and _sole(got, alloc_id, index, fresh)


def _sole(got: "Received", alloc_id: int, index: int, fresh: dict) -> bool:
    sole = fresh.get(got.key) if fresh else None
    return sole is not None and sole[0] == got.source and sole[1] == alloc_id and index in sole[2]


class Received:
    """A pushed piece: its descriptor (the comm path's, bytes on the host), the task whose
    write it holds and the home that sent it."""

    __slots__ = ("desc", "key", "source", "nbytes")

    def __init__(self, desc: dict, key: str, source: str, nbytes: int):
        self.desc, self.key, self.source, self.nbytes = desc, key, source, nbytes
