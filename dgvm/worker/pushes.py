"""Pieces pushed by their chunk's home to the workers that read them.

A task that reads a few rows of a chunk held by another worker (a stencil's halo rows,
``Access._piece``) asks the chunk's home for their bytes: a round trip on the path of
every step, while both workers run their own host work. Instead, the home remembers who
asked for which bytes (a *subscription*, ``subscribe``) and, when a task here has written
that chunk, sends those bytes to the reader, tagged with the task's key: on their own as
the task answers its client (``after_task``), or, to a worker whose task waits for this
one to end (``dgvm.dispatch.peers``), with the answer that it ended (``for_reader``). The
reader keeps the last bytes pushed of each piece (``received``, bounded); a task there
that reads the piece takes them instead of asking.

A task takes pushed bytes only when they are the ones it must read. Its client names the
tasks of other workers it follows that are the only ones it follows that may have written
some chunks, with those chunks and the worker each ran on (``fresh``:
``dgvm.client.ordering.TaskChunks.sole_writers``). Bytes of such a chunk tagged with that
task, from that worker, are the chunk as that task left it: a write to the chunk after
that task's is either another task this one follows (then the pushed task is not the only
writer) or a task that follows this one, as it reads the chunk (after it ended). The
bytes were read after the task's write ended on the device (``ChunkStore.last_write``);
a chunk no longer at home there, or being moved away, is not pushed. Anything else (no
push yet, an older one, a tag the task does not follow) and the task asks the home.

A subscription ends after ``UNREAD`` pushes in a row that no task read, when its chunk is
no longer home here or its allocation is freed, or when the reader does not answer. A
piece larger than ``PIECE_BYTES`` is not pushed.
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

UNREAD = 3  # pushes of a piece in a row that no task read: the reader no longer reads it
SUBSCRIPTIONS = 1024  # pieces this worker pushes at most (readers and spans together)
PIECE_BYTES = 4 << 20  # a larger piece is not pushed (each write would send it again)
RECEIVED = 1024  # pushed pieces a reader keeps at most (the oldest dropped first) ...
RECEIVED_BYTES = 256 << 20  # ... and bytes of them


def enabled() -> bool:
    """Whether homes push pieces to their readers (``dgvm.transfer.push-pieces``)."""
    return bool(config.get("transfer.push-pieces"))


class Pushes:
    """One worker's pushed pieces: those it pushes as a home and those pushed to it."""

    def __init__(self, worker, plugin):
        self.worker = worker
        self.plugin = plugin  # its ``export``, the same read a reader's request gets
        # As a home: alloc id -> chunk index -> {(start, stop, reader)}
        self.subscriptions: dict[int, dict[int, set]] = {}
        self._subscribed = 0
        # As a reader: (alloc id, index, start, stop) -> Received
        self.received: "collections.OrderedDict[tuple, Received]" = collections.OrderedDict()
        self._received_bytes = 0
        self._lock = threading.Lock()  # (received: pushes on the loop, reads in task threads)
        self.sent = 0  # pushes sent (the reader answered)

    # -- as a home (on the event loop) -------------------------------------------------------

    def subscribe(self, alloc_id: int, index: int, span, reader: str) -> None:
        """``reader`` asked for bytes ``span`` of home chunk ``index``: push them to it
        after each task here that writes the chunk."""
        if reader == self.worker.address or int(span[1]) - int(span[0]) > PIECE_BYTES or not enabled():
            return
        chunks = self.subscriptions.setdefault(alloc_id, {})
        readers = chunks.setdefault(index, set())
        entry = (int(span[0]), int(span[1]), reader)
        if entry not in readers and self._subscribed < SUBSCRIPTIONS:
            readers.add(entry)
            self._subscribed += 1

    def _unsubscribe(self, alloc_id: int, index: int, entry: tuple) -> None:
        readers = self.subscriptions.get(alloc_id, {}).get(index)
        if readers is None or entry not in readers:
            return
        readers.discard(entry)
        self._subscribed -= 1
        if not readers:
            del self.subscriptions[alloc_id][index]
            if not self.subscriptions[alloc_id]:
                del self.subscriptions[alloc_id]

    def forget(self, alloc_id: int) -> None:
        """Allocation ``alloc_id`` was freed: nothing of it is pushed any more, nor kept."""
        chunks = self.subscriptions.pop(alloc_id, None)
        if chunks:
            self._subscribed -= sum(len(r) for r in chunks.values())
        with self._lock:
            for piece in [p for p in self.received if p[0] == alloc_id]:
                self._received_bytes -= self.received.pop(piece).nbytes

    def _entries(self, wrote):
        """(alloc id, index, subscription) of the pieces readers read of chunks ``wrote``."""
        for alloc_id, indices in wrote:
            chunks = self.subscriptions.get(alloc_id)
            if chunks:
                for index in indices:
                    for entry in list(chunks.get(index, ())):
                        yield alloc_id, index, entry

    def after_task(self, key: str, wrote, skip=()) -> None:
        """Task ``key`` finished here, having written chunks ``wrote`` ((alloc id,
        indices) each) in place: push the pieces of them that readers subscribed to (not
        awaited), except to readers in ``skip`` (their tasks wait for this one: the pieces
        go with the answer, ``for_reader``)."""
        if not self.subscriptions:
            return
        for alloc_id, index, entry in self._entries(wrote):
            if entry[2] not in skip:
                asyncio.ensure_future(self._push(key, alloc_id, index, entry))

    async def _piece(self, alloc_id: int, index: int, entry: tuple):
        """The comm path's descriptor of a subscribed piece, read here now after the
        chunk's last write; None (and the subscription ends) if the chunk is no longer
        only here."""
        start, stop, reader = entry
        desc, = await self.plugin.export(alloc_id, [index], "comm", to=reader, span=[start, stop])
        desc = messages.decode(desc)
        if desc is messages.MOVED or desc.get("leaving"):  # not (only) here any more
            self._unsubscribe(alloc_id, index, entry)
            return None
        return desc

    async def for_reader(self, reader: str, tasks) -> list:
        """The pieces ``reader`` reads of the chunks ``tasks`` ((key, [(alloc id,
        chunks)]) each, ended here) wrote, as ``pushed``'s arguments each."""
        out = []
        for key, wrote in tasks:
            for alloc_id, index, entry in self._entries(wrote):
                if entry[2] != reader:
                    continue
                try:
                    desc = await self._piece(alloc_id, index, entry)
                except Exception:  # noqa: BLE001  (freed meanwhile: the reader asks)
                    self._unsubscribe(alloc_id, index, entry)
                    continue
                if desc is not None:
                    out.append({"alloc_id": alloc_id, "index": index, "span": list(entry[:2]), "key": key,
                                "source": self.worker.address, "desc": desc})
        return out

    async def _push(self, key: str, alloc_id: int, index: int, entry: tuple) -> None:
        start, stop, reader = entry
        try:
            desc = await self._piece(alloc_id, index, entry)
            if desc is None:
                return
            answer = await messages.call(
                self.worker.rpc(reader), messages.PUSHED, alloc_id=alloc_id, index=index, span=[start, stop],
                key=key, source=self.worker.address, desc=desc)
        except Exception:  # noqa: BLE001  (freed, the reader left: it asks, if it reads at all)
            logger.debug("dgvm: push of chunk %s of allocation %s to %s", index, alloc_id, reader, exc_info=True)
            self._unsubscribe(alloc_id, index, entry)
            return
        self.sent += 1
        if answer != "keep":
            self._unsubscribe(alloc_id, index, entry)

    # -- as a reader ------------------------------------------------------------------------

    def pushed(self, alloc_id: int, index: int, span: list, key: str, source: str, desc: dict) -> str:
        """RPC handler (``messages.PUSHED``): bytes ``span`` of chunk ``index`` of
        ``alloc_id`` as task ``key`` left them at ``source``, its home. Answers "keep"
        while tasks here read the piece, "drop" after ``UNREAD`` pushes no task read."""
        piece = (int(alloc_id), int(index), int(span[0]), int(span[1]))
        with self._lock:
            old = self.received.pop(piece, None)
            if old is not None:
                self._received_bytes -= old.nbytes
            unread = 0 if old is None or old.read else old.unread + 1
            if unread >= UNREAD or not enabled():
                return "drop"
            got = self.received[piece] = Received(unwrap(desc), key, source, unread, piece[3] - piece[2])
            self._received_bytes += got.nbytes
            while len(self.received) > RECEIVED or self._received_bytes > RECEIVED_BYTES:
                self._received_bytes -= self.received.popitem(last=False)[1].nbytes
        return "keep"

    def take(self, alloc_id: int, index: int, start: int, stop: int, fresh: dict):
        """The pushed descriptor of bytes ``[start, stop)`` of that chunk if a task
        following ``fresh`` (task key -> [worker, alloc id, chunk indices] of the chunks
        it is the only writer of among those followed) must read exactly those bytes,
        else None. Either way the piece counts as read (its pushes go on)."""
        with self._lock:
            got = self.received.get((alloc_id, index, start, stop))
            if got is None:
                return None
            got.read = True
            sole = fresh.get(got.key) if fresh else None
            if sole is None or sole[0] != got.source or sole[1] != alloc_id or index not in sole[2]:
                return None
            return got.desc

    def usable(self, alloc_id: int, index: int, start: int, stop: int, fresh: dict) -> bool:
        """Would ``take`` give the bytes (without counting a read)?"""
        with self._lock:
            got = self.received.get((alloc_id, index, start, stop))
            sole = fresh.get(got.key) if got is not None and fresh else None
            return sole is not None and sole[0] == got.source and sole[1] == alloc_id and index in sole[2]

    def read(self, alloc_id: int, index: int, start: int, stop: int) -> None:
        """A task here read those bytes from the home (asked): their pushes go on."""
        with self._lock:
            got = self.received.get((alloc_id, index, start, stop))
            if got is not None:
                got.read = True


class Received:
    """A pushed piece: its descriptor (the comm path's, bytes on the host), the task whose
    write it holds, the home that sent it, and whether a task read the piece since."""

    __slots__ = ("desc", "key", "source", "unread", "read", "nbytes")

    def __init__(self, desc: dict, key: str, source: str, unread: int, nbytes: int):
        self.desc, self.key, self.source, self.unread, self.read = desc, key, source, unread, False
        self.nbytes = nbytes
