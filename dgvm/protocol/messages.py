"""What the three processes say to each other: the names, the shapes, and one codec.

- RPC handlers, by name: the scheduler's (``SCHEDULER_HANDLERS``, served by
  ``dgvm.scheduler.plugin.GVATPlugin``) and each worker's (``WORKER_HANDLERS``, served by
  ``dgvm.worker.plugin.ChunkStorePlugin``). Every call goes through ``call``, every
  handler table through ``serve``.
- Structured answers and requests travel as dicts of the records below (``ChunkMap``,
  ``Translation``, ``Where``, ``PullChunk``, ``Pulled``, ``Migrated``); ``call`` gives
  the caller the record.
- Refusals travel as data: a handler that raises one of the errors in ``REFUSALS``
  answers ``{SPECIAL: kind, "message": text}`` (the scheduler does not deserialize a
  worker's exceptions, and Dask logs every exception a handler raises as a failure), and
  ``call`` raises the same error type with the same message on the caller's side. A chunk
  its holder no longer has comes back as ``MOVED`` (a value: ask the GVAT again).
- Stream messages travel on Dask's batched streams (``{"op": NAME, ...}``); task keys of
  dgvm's work start with ``TASK_PREFIX``, so a worker can tell them from other Dask tasks.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from dgvm.protocol.errors import (
    AccessDenied,
    ChunkLost,
    ConnectionBroke,
    DgvmError,
    InvalidAddress,
    InvalidArgument,
    InvalidArgumentType,
    KernelError,
    OutOfDeviceMemory,
    PeerClosing,
)
from dgvm.protocol.records import (
    AllocationInfo,
    AllocId,
    ChunkIndex,
    FlatRecord,
    Record,
    WorkerAddress,
    WorkerInfo,
)

# -- RPC handlers of the scheduler (GVATPlugin) -------------------------------------------
ALLOCATE = "dgvm_allocate"  # place, book and create chunks on workers -> ChunkMap
FREE = "dgvm_free"  # owner check, forget, free the chunks on live homes -> bytes
FREE_ALL = "dgvm_free_all"  # every allocation (a local cluster closing) -> count
TRANSLATE = "dgvm_translate"  # virtual addresses -> Translation
TABLE = "dgvm_table"  # -> [AllocationInfo]
WORKERS = "dgvm_workers"  # -> [WorkerInfo]
CHUNK_MAP = "dgvm_chunk_map"  # -> ChunkMap
LOCATE = "dgvm_locate"  # where a worker that misses a chunk fetches it -> Where
REPLICA_ADDED = "dgvm_replica_added"  # -> KEPT, STALE or GONE
LAUNCHED = "dgvm_launched"  # a task's writes and reads (also as the stream message REPORT)
STATS = "dgvm_stats"  # counters per worker and allocation -> dict
MIGRATE = "dgvm_migrate"  # move chunk homes -> Migrated
REBALANCE = "dgvm_rebalance"  # even out device memory -> {"chunks", "bytes"}
REPLICAS_DROPPED = "dgvm_replicas_dropped"  # a worker evicted replicas
RELEASES_SENT = "dgvm_releases_sent"  # the last release ticket sent to a worker -> int or None
SET_REPLICAS = "dgvm_set_replicas"  # keep k copies of each chunk of an allocation -> ChunkMap
CONTEXT_LOST = "dgvm_context_lost"  # a worker's device context ended in a task, which fails
# A client's tasks a worker did not answer (its connection broke: dgvm.client.direct): what
# becomes of each -> {key: {"rerun": address, "written": ...} | {"lost" | "failed" | "broke": text}}
STRANDED = "dgvm_stranded"

SCHEDULER_HANDLERS = frozenset({
    ALLOCATE, FREE, FREE_ALL, TRANSLATE, TABLE, WORKERS, CHUNK_MAP, LOCATE, REPLICA_ADDED,
    LAUNCHED, STATS, MIGRATE, REBALANCE, REPLICAS_DROPPED, RELEASES_SENT, SET_REPLICAS,
    CONTEXT_LOST, STRANDED,
})

# -- RPC handlers of each worker (ChunkStorePlugin) -----------------------------------------
STORE_ALLOCATE = "dgvm_store_allocate"  # create chunks, all or nothing -> bytes
STORE_FREE = "dgvm_store_free"  # release every chunk of an allocation held here -> bytes
WRITE = "dgvm_write"  # pieces (chunk, offset, bytes) -> bytes written
READ = "dgvm_read"  # pieces (chunk, offset, length) -> [host arrays]
STORE_INFO = "dgvm_store_info"  # address and heartbeat metrics -> dict
EXPORT = "dgvm_export"  # descriptors of chunks for a transfer path -> [dict or MOVED]; for a
# move (``move=True``) the chunks are frozen there until it ends, and a chunk the mover holds
# a current replica of comes back as {"current": True}
DROP_REPLICAS = "dgvm_drop_replicas"  # -> bytes
PULL = "dgvm_pull"  # become the home of chunks -> Pulled
IPC_FORGET = "dgvm_ipc_forget"  # close mappings of a peer's buffers -> count
REFRESH = "dgvm_refresh"  # copy chunks written at their homes into the backups here -> count
PROMOTE = "dgvm_promote"  # backups here become homes (their home left) -> [indices]
STORE_REPORT = "dgvm_store_report"  # what the store holds, for a new scheduler -> StoreReport
# A client's connection for its operations (``dgvm.client.direct``); not a served call: the
# handler reads tasks from the connection and answers on it until it closes.
DIRECT = "dgvm_direct"
# Worker to worker: wait for tasks of the direct plane there to end -> {"failed": error} of
# the first that failed, {} when all finished, {"unknown": keys} for keys that never came.
DIRECT_ENDED = "dgvm_direct_ended"
# Home to reader: bytes of chunks its next task reads, as the task that wrote them there
# left them (``dgvm.worker.pushes``) -> how many
PUSHED = "dgvm_pushed"

WORKER_HANDLERS = frozenset({
    STORE_ALLOCATE, STORE_FREE, WRITE, READ, STORE_INFO, EXPORT, DROP_REPLICAS, PULL, IPC_FORGET,
    REFRESH, PROMOTE, STORE_REPORT, PUSHED,
})

# -- plugins, events, streams, tasks ----------------------------------------------------
GVAT_PLUGIN = "dgvm-gvat"  # the scheduler plugin's name
STORE_PLUGIN = "dgvm-store"  # the worker plugin's name
EXTENSION = "dgvm"  # scheduler.extensions: the plugin; worker.extensions: the chunk store
HEARTBEAT = "dgvm"  # worker.metrics: the chunk store's figures in each heartbeat

# Chunks of an allocation got a new home: scheduler -> clients (Dask event topic); or,
# {"owner", "all": True}, every chunk map of that client is stale (the GVAT was rebuilt).
MOVED_TOPIC = "dgvm-moved"
# A worker left the cluster, its chunks with it: scheduler -> clients (Dask event topic).
LEFT_TOPIC = "dgvm-worker-left"
# A task of the direct plane ended on a worker: {"key", "worker", "start", "stop",
# "status", "chunks"} (worker -> scheduler, Dask event topic; the dashboard's operations).
OPERATIONS_TOPIC = "dgvm-operations"
# A task's report to the GVAT of what it wrote and read: worker -> scheduler.
REPORT = "dgvm-launched"
# An old home's release of moved chunks (dgvm.scheduler.releases): scheduler -> worker.
RELEASE = "dgvm-release"
# A move ended without moving these chunks: their old home lets writes go on (a move
# copying a chunk holds its home's writes back: ``ChunkStore.freeze``): scheduler -> worker.
THAW = "dgvm-thaw"
# A worker left the cluster (dgvm.transfer.ipc_retire): scheduler -> dgvm workers.
PEER_LEFT = "dgvm-peer-left"
# Tasks that ran on a worker that left run again here, with the chunks their first run
# wrote for good (copies hold them): scheduler -> the worker they run on, before they do.
WRITTEN = "dgvm-written"

# Every task dgvm submits has a key that starts so (dgvm.client.dispatch).
TASK_PREFIX = "dgvm-"
# The Dask annotation of a dgvm task that lists the allocations it names.
ALLOCATIONS_ANNOTATION = "dgvm_allocations"
# The Dask annotation of a dgvm task that may run again elsewhere when its worker leaves,
# once copies of its chunks took over (``replicas``): "writes" (it writes only its own
# chunks and passes over those its first run wrote: ``WRITTEN``), "reads" (it only reads:
# not once it had finished), "" (never).
RERUN_ANNOTATION = "dgvm_rerun"

# The GVAT's answers to REPLICA_ADDED.
KEPT = "kept"  # the replica counts
STALE = "stale"  # the chunk moved or was written while it was copied: drop it, ask again
GONE = "gone"  # the allocation was freed, or the worker is unknown: drop it


def report(alloc_id: AllocId, wrote: list, reads: dict, stats: dict, key: str | None = None) -> dict:
    """The stream message REPORT (``GVATPlugin.launched``): the chunks task ``key`` wrote,
    what it read, and its store's counters as of then (``stats``)."""
    return {"op": REPORT, "alloc_id": alloc_id, "wrote": wrote, "reads": reads, "stats": stats,
            "key": key}


def release(alloc_id: AllocId, indices: list, ticket: int) -> dict:
    """The stream message RELEASE (``ChunkStorePlugin.release``)."""
    return {"op": RELEASE, "alloc_id": alloc_id, "indices": indices, "ticket": ticket}


def thaw(alloc_id: AllocId, indices: list) -> dict:
    """The stream message THAW (``ChunkStorePlugin.thaw``)."""
    return {"op": THAW, "alloc_id": alloc_id, "indices": indices}


ALL_WRITTEN = "all"  # WRITTEN: every chunk the task writes (it had finished)


def written(done: dict) -> dict:
    """The stream message WRITTEN (``ChunkStorePlugin.written``): task key -> [[alloc id,
    chunk index], ...] written for good, or "all"."""
    return {"op": WRITTEN, "done": done}


def peer_left(worker: WorkerAddress, arena: str | None = None) -> dict:
    """The stream message PEER_LEFT (``ChunkStorePlugin.peer_left``); ``arena``: the
    shared-memory arena the worker that left had (``cpu``), which peers stop mapping."""
    return {"op": PEER_LEFT, "worker": worker, "arena": arena}


# -- structured requests and answers ----------------------------------------------------
@dataclass(frozen=True)
class ChunkMap(FlatRecord):
    """An allocation's chunks, columnar: ``offsets`` (nchunks + 1 byte offsets), and per
    chunk an index into ``workers``/``devices``/``tiers`` (``home``) and a version.
    The answer of ALLOCATE and CHUNK_MAP, and part of ``Migrated``."""

    alloc_id: AllocId
    vaddr: int
    nbytes: int
    offsets: list
    home: list
    workers: list
    devices: list
    tiers: list
    versions: list


@dataclass(frozen=True)
class Translation(FlatRecord):
    """Many virtual addresses translated (TRANSLATE), columnar: per address its
    allocation, chunk, offset in the chunk and an index into ``workers``/``devices``/
    ``tiers``."""

    alloc_id: list
    chunk_index: list
    offset: list
    home: list
    workers: list
    devices: list
    tiers: list


@dataclass(frozen=True)
class Where(FlatRecord):
    """Where a worker that misses a chunk fetches it from (LOCATE): the home, the
    transfer path, and the version the copy must have."""

    home: WorkerAddress
    path: str
    version: int


@dataclass(frozen=True)
class PullChunk(FlatRecord):
    """A chunk a new home pulls (PULL's ``chunks``): its index, current home, path and
    version."""

    index: ChunkIndex
    home: WorkerAddress
    path: str
    version: int


@dataclass(frozen=True)
class Pulled(FlatRecord):
    """The chunks a PULL made homes here, with the versions they have."""

    moved: list
    versions: list


@dataclass(frozen=True)
class Migrated(Record):
    """The answer of MIGRATE: the chunks moved and the new chunk map, which holds the
    allocation's moves up to the one numbered ``moves`` (the events ``MOVED_TOPIC`` of
    those are old news to the client; numbers only grow)."""

    moved: list
    map: ChunkMap
    moves: int = 0

    def to_dict(self) -> dict:
        return {"moved": self.moved, "map": self.map.to_dict(), "moves": self.moves}

    @classmethod
    def from_dict(cls, d: dict) -> "Migrated":
        return cls(list(d["moved"]), ChunkMap.from_dict(d["map"]), int(d.get("moves", 0)))


# -- the codec ---------------------------------------------------------------------------
SPECIAL = "dgvm-special"  # the key that marks a special answer

#: errors a handler answers as data, by kind
REFUSALS: dict[str, type[DgvmError]] = {
    "oom": OutOfDeviceMemory,  # a device (or the cluster) is full
    "invalid": InvalidAddress,  # the allocation, chunk or address is gone or never was
    "denied": AccessDenied,  # another client's allocation
    "lost": ChunkLost,  # the chunk's home left the cluster
    "kernel": KernelError,
    "broke": ConnectionBroke,  # a handler's own request to another process lost its connection
    "argument": InvalidArgument,  # an argument out of range (dgvm.protocol.arguments)
    "argument-type": InvalidArgumentType,  # an argument of the wrong type, or a missing one
    "error": DgvmError,  # anything else dgvm refuses, e.g. a worker busy with releases
}
_KINDS = {cls: kind for kind, cls in REFUSALS.items()}


class _Moved:
    """The answer for a chunk its holder no longer has (it moved, or was freed)."""

    def __repr__(self):
        return "MOVED"


MOVED = _Moved()
_MOVED_ANSWER = {SPECIAL: "moved"}


def _kind(error: DgvmError) -> str | None:
    """The kind of refusal ``error`` travels as: that of its nearest class in
    ``REFUSALS`` (a subclass travels as its base); None for none."""
    return next((_KINDS[c] for c in type(error).__mro__ if c in _KINDS), None)


def refusal(error: DgvmError) -> dict:
    """``error`` as a handler's answer, as its nearest class in ``REFUSALS``."""
    return {SPECIAL: _kind(error), "message": str(error)}


def moved() -> dict:
    """The answer for a chunk the holder no longer has; decoded as ``MOVED``."""
    return dict(_MOVED_ANSWER)


def decode(answer):
    """A handler's answer as the caller sees it: a refusal raised as its error, a moved
    chunk as ``MOVED``, anything else as it came."""
    if type(answer) is dict and SPECIAL in answer:
        kind = answer[SPECIAL]
        if kind == "moved":
            return MOVED
        raise REFUSALS[kind](answer["message"])
    return answer


def _descriptors(answer: list) -> list:
    return [decode(d) for d in answer]


#: how ``call`` turns the answer of a handler into what its caller gets
ANSWERS: dict[str, Callable[[Any], Any]] = {
    ALLOCATE: ChunkMap.from_dict,
    CHUNK_MAP: ChunkMap.from_dict,
    SET_REPLICAS: ChunkMap.from_dict,
    MIGRATE: Migrated.from_dict,
    TRANSLATE: Translation.from_dict,
    LOCATE: Where.from_dict,
    PULL: Pulled.from_dict,
    TABLE: lambda rows: [AllocationInfo.from_dict(r) for r in rows],
    WORKERS: lambda rows: [WorkerInfo.from_dict(r) for r in rows],
    EXPORT: _descriptors,
}


async def call(rpc, handler: str, *, required: bool = False, **kwargs):
    """Call ``handler`` through ``rpc`` (``client.scheduler``, ``scheduler.rpc(address)``,
    ``worker.rpc(address)``, ``worker.scheduler``) and decode its answer: a refusal is
    raised, a structured answer comes back as its record. ``required``: the handler always
    answers something, so ``None`` (Dask's answer for a handler the process no longer has:
    a worker whose dgvm store closed) raises ``PeerClosing``, a ``ConnectionBroke``."""
    answer = await getattr(rpc, handler)(**kwargs)
    if answer is None and required:
        raise PeerClosing(f"{getattr(rpc, 'addr', 'the process asked')} no longer serves {handler}: "
                              "it is closing")
    answer = decode(answer)
    as_record = ANSWERS.get(handler)
    return answer if as_record is None else as_record(answer)


def served(handler: Callable) -> Callable:
    """``handler`` as it is installed: a refusal it raises is answered as data, and a
    record it returns travels as its dict. An ``OSError`` it raises (a peer it asked went
    away, or this process is closing: its connection pool closes under its requests) is
    answered as ``ConnectionBroke``: raised out of a handler, Dask would take it for the
    caller's own connection breaking and close that."""

    signature = inspect.signature(handler)

    @functools.wraps(handler)
    async def answer(*args, **kwargs):
        try:
            try:
                result = handler(*args, **kwargs)
            except TypeError as e:  # a missing or unknown argument: refused, naming it
                _check_binds(handler, signature, args, kwargs, e)
                raise
            if inspect.isawaitable(result):
                result = await result
        except DgvmError as e:
            if type(e) is not DgvmError and _kind(e) == _KINDS[DgvmError]:
                raise  # another dgvm error (ConfigError, ...) travels as Dask sends exceptions
            return refusal(e)
        except OSError as e:
            return refusal(ConnectionBroke(f"{getattr(handler, '__name__', 'a dgvm handler')}: a connection "
                                           f"to another process broke: {type(e).__name__}: {e}"))
        return result.to_dict() if isinstance(result, Record) else result

    return answer


def _check_binds(handler: Callable, signature: inspect.Signature, args, kwargs, error: TypeError) -> None:
    """Raise ``InvalidArgumentType`` if ``handler`` cannot take these arguments (Python's
    message names the argument); nothing if the TypeError came from inside it."""
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        raise InvalidArgumentType(f"{handler.__name__}: {error}") from None


def serve(handlers: dict[str, Callable]) -> dict[str, Callable]:
    """A plugin's handler table ({name: method}) as the server installs it."""
    return {name: served(fn) for name, fn in handlers.items()}
