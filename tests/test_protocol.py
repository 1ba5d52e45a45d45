"""The protocol (dgvm.protocol.messages): handler names, message records, the codec of
special answers, and where per-process state lives (one session per client, transfer
state per worker, none built by ``import dgvm``)."""

from __future__ import annotations

import asyncio
import gc
import weakref
import pickle
import subprocess
import sys

import msgpack
import pytest
from distributed import Client

import dgvm
from dgvm.client.allocation import LiveAllocations, live_allocations
from dgvm.client.ordering import TaskChunks
from dgvm.client.session import Session, call_scheduler, session_of
from dgvm.protocol import messages
from dgvm.protocol.errors import (
    AccessDenied,
    ChunkLost,
    ConfigError,
    ConnectionBroke,
    DgvmError,
    InvalidAddress,
    KernelError,
    OutOfDeviceMemory,
)
from dgvm.protocol.messages import ChunkMap, Migrated, PullChunk, Pulled, Translation, Where
from dgvm.protocol.records import ArraySpec
from dgvm.scheduler.plugin import GVATPlugin
from dgvm.worker.plugin import ChunkStorePlugin

MiB = 2**20


def _over_the_wire(answer):
    """An answer as the comm carries it (msgpack)."""
    return msgpack.unpackb(msgpack.packb(answer), strict_map_key=False)


# -- handler names --------------------------------------------------------------------------

def test_handler_tables_list_exactly_the_protocols_handler_names():
    assert set(GVATPlugin().handlers()) == messages.SCHEDULER_HANDLERS
    assert set(ChunkStorePlugin(backend="cpu").handlers()) == messages.WORKER_HANDLERS
    assert not messages.SCHEDULER_HANDLERS & messages.WORKER_HANDLERS
    assert set(messages.ANSWERS) <= messages.SCHEDULER_HANDLERS | messages.WORKER_HANDLERS


# -- the codec ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, error", [
    ("oom", OutOfDeviceMemory),
    ("invalid", InvalidAddress),
    ("denied", AccessDenied),
    ("lost", ChunkLost),
    ("kernel", KernelError),
    ("broke", ConnectionBroke),
    ("error", DgvmError),  # e.g. a worker still busy with the releases sent to it
])
def test_every_refusal_comes_back_as_its_error_with_its_message(kind, error):
    assert messages.REFUSALS[kind] is error
    answer = _over_the_wire(messages.refusal(error(f"the {kind} message")))
    with pytest.raises(error, match=f"^the {kind} message$") as raised:
        messages.decode(answer)
    assert type(raised.value) is error


def test_a_refusal_of_a_subclass_travels_as_its_nearest_refused_base():
    class Gone(InvalidAddress):
        pass

    with pytest.raises(InvalidAddress, match="^freed meanwhile$"):
        messages.decode(_over_the_wire(messages.refusal(Gone("freed meanwhile"))))


def test_a_moved_chunk_comes_back_as_a_value():
    assert messages.decode(_over_the_wire(messages.moved())) is messages.MOVED
    descs = [{"shm": "a", "offset": 0, "nbytes": 8}, messages.moved()]
    assert messages.ANSWERS[messages.EXPORT](_over_the_wire(descs)) == [descs[0], messages.MOVED]


def test_plain_and_structured_answers_pass_as_they_are():
    for answer in (3, None, "kept", [1, 2], {"moved": [1], "versions": [0]}, {"chunks": 2, "bytes": 9}):
        assert messages.decode(answer) == answer


def test_served_handlers_answer_refusals_and_records_as_data():
    def refuses():
        raise ChunkLost("chunk 3 of allocation 1 was on tcp://w, which left")

    async def fails():
        raise ConfigError("not a refusal: raised as it is")

    def locates():
        return Where("tcp://w", "shm", 4)

    table = messages.serve({"refuses": refuses, "fails": fails, "locates": locates})
    assert asyncio.run(table["refuses"]()) == {
        messages.SPECIAL: "lost", "message": "chunk 3 of allocation 1 was on tcp://w, which left"}
    with pytest.raises(ConfigError):
        asyncio.run(table["fails"]())
    assert asyncio.run(table["locates"]()) == {"home": "tcp://w", "path": "shm", "version": 4}


def test_a_broken_connection_to_a_peer_is_answered_as_a_dgvm_error():
    # Raised out of a handler, Dask would take an OSError for the caller's own
    # connection breaking and close it: the caller would see a raw CommClosedError.
    async def migrate():
        raise ConnectionResetError("the target worker's process died")

    answer = asyncio.run(messages.serve({"dgvm_migrate": migrate})["dgvm_migrate"]())
    with pytest.raises(ConnectionBroke, match="migrate: a connection to another process broke: "
                                              "ConnectionResetError: the target worker's process died"):
        messages.decode(_over_the_wire(answer))


class _Rpc:
    """Stands in for a Dask rpc: each handler answers what ``answers`` says."""

    def __init__(self, **answers):
        self.answers = answers

    def __getattr__(self, op):
        async def send(**kwargs):
            return _over_the_wire(self.answers[op])
        return send


def test_call_decodes_into_the_handlers_record_or_raises_its_refusal():
    chunk_map = ChunkMap(7, 4096, 96, [0, 64, 96], [0, 1], ["a", "b"], ["cpu", "cpu"], ["device", "lost"], [0, 2])
    rpc = _Rpc(**{
        messages.CHUNK_MAP: chunk_map.to_dict(),
        messages.MIGRATE: Migrated([1], chunk_map).to_dict(),
        messages.PULL: Pulled([1, 2], [3, 4]).to_dict(),
        messages.LOCATE: messages.refusal(ChunkLost("gone with its worker")),
        messages.STORE_ALLOCATE: messages.refusal(OutOfDeviceMemory("full")),
        messages.FREE: 96,
    })
    assert asyncio.run(messages.call(rpc, messages.CHUNK_MAP, alloc_id=7)) == chunk_map
    assert asyncio.run(messages.call(rpc, messages.MIGRATE)) == Migrated([1], chunk_map)
    assert asyncio.run(messages.call(rpc, messages.PULL)) == Pulled([1, 2], [3, 4])
    assert asyncio.run(messages.call(rpc, messages.FREE)) == 96
    with pytest.raises(ChunkLost, match="gone with its worker"):
        asyncio.run(messages.call(rpc, messages.LOCATE))
    with pytest.raises(OutOfDeviceMemory, match="full"):
        asyncio.run(messages.call(rpc, messages.STORE_ALLOCATE))


def test_message_records_travel_as_dicts():
    for record in (
        Translation([1], [0], [8], [0], ["a"], ["cpu"], ["device"]),
        Where("tcp://a", "comm", 2),
        PullChunk(3, "tcp://a", "shm", 1),
        Pulled([3], [1]),
    ):
        assert type(record).from_dict(_over_the_wire(record.to_dict())) == record


def test_an_array_spec_travels_without_what_it_computed():
    spec = ArraySpec(4, "me", (10, 6), "<f8", ((5, 5), (3, 3)))
    assert spec.bounds(3) == ([5, 3], [10, 6])  # computes and keeps the grid and edges
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and "grid" not in again.__dict__ and again.block(3) == (1, 1)
    with pytest.raises(AttributeError):
        spec.alloc_id = 5  # a record: frozen


# -- per-process state ------------------------------------------------------------------------

def test_import_dgvm_builds_no_worker_side_transfer_state():
    code = (
        "import gc, dgvm\n"
        "from dgvm.transfer import Transfers\n"
        "from dgvm.transfer.ipc_mappings import ImportedMappings\n"
        "from dgvm.transfer.shm import PeerArenas\n"
        "kinds = (Transfers, ImportedMappings, PeerArenas)\n"
        "print(sum(isinstance(o, kinds) for o in gc.get_objects()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0"]


def test_two_clients_in_one_process_keep_separate_session_state(case):
    with Client(case.cluster.scheduler_address, set_as_default=False) as other:
        mine, theirs = session_of(case.client), session_of(other)
        assert isinstance(mine, Session) and mine is not theirs
        assert mine is session_of(case.client)
        assert mine.part(LiveAllocations) is not theirs.part(LiveAllocations)
        assert mine.part(TaskChunks) is not theirs.part(TaskChunks)
        with dgvm.malloc(2 * MiB, chunk_bytes=MiB, client=case.client) as a, \
                dgvm.malloc(MiB, client=other) as b:
            assert live_allocations(case.client) == [a] and live_allocations(other) == [b]
            assert a.session is mine and b.session is theirs
            # News that a's chunks moved marks a's chunk map stale in a's session only.
            event = (0.0, {"alloc_id": a.alloc_id})
            theirs.part(LiveAllocations)._on_moved(event)
            assert not a.stale
            mine.part(LiveAllocations)._on_moved(event)
            assert a.stale and not b.stale
        assert live_allocations(case.client) == [] and live_allocations(other) == []
        gone = weakref.ref(other)
    del other, theirs, b
    gc.collect()
    assert gone() is None  # the session went with its client


def test_each_worker_keeps_its_own_transfer_state(case):
    def state(dask_worker):
        plugin = dask_worker.plugins[messages.STORE_PLUGIN]
        return id(plugin.transfers), id(plugin.transfers.mappings), id(plugin.transfers.arenas)

    ids = list(case.client.run(state).values())
    assert len(ids) == len(case.capacities)
    for k in range(3):  # the workers of the cpu case share one process
        assert len({i[k] for i in ids}) == len(ids)


def test_the_gvat_answers_a_gone_allocation_as_a_refusal(case):
    buf = dgvm.malloc(MiB)
    buf.free()
    raw = case.client.sync(getattr(case.client.scheduler, messages.CHUNK_MAP), alloc_id=buf.alloc_id)
    assert raw == messages.refusal(InvalidAddress(f"allocation {buf.alloc_id} was already freed"))
    with pytest.raises(InvalidAddress, match="already freed"):
        call_scheduler(messages.CHUNK_MAP, case.client, alloc_id=buf.alloc_id)
