"""A worker that closes (not killed: its nanny, the scheduler or a user closes it) while it
serves a client's write: the write answers as for a worker that died, with ``ChunkLost``
naming the chunks it held, or rightly where a copy took over; never with the error of a
connection the closing worker broke under its own request.

A closing worker tears its dgvm store down first (its handlers go: Dask answers ``None``
for a handler it lacks), then closes its connection pool: a request it was making (a
write tells the scheduler which chunks it wrote) fails with "ConnectionPool closing.".
One in-process cluster per test: a worker of it closes."""

import asyncio
import socket

import numpy as np
import pytest

import dgvm
from dgvm.protocol import messages

BYTES, CHUNK = 3 * 4096, 4096


@pytest.fixture
def cluster():
    cluster = dgvm.LocalCluster(n_workers=3, backend="cpu", processes=False, device_memory="16MiB",
                                dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


def _worker(cluster, address):
    return next(w for w in cluster.workers.values() if w.address == address)


def _nowhere() -> str:
    """An address nobody listens on: Dask retries a refused connect until its timeout."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


class _ClosingOnLaunched:
    """``worker.scheduler`` as the worker closes while a write tells the scheduler what it
    wrote: that request is a connect its connection pool's close breaks."""

    def __init__(self, worker):
        self.worker, self.scheduler = worker, worker.scheduler

    def __getattr__(self, op):
        if op != messages.LAUNCHED:
            return getattr(self.scheduler, op)

        async def launched(**_):
            asyncio.ensure_future(self.worker.close())
            await self.worker.rpc.connect(_nowhere())  # CommClosedError: ConnectionPool closing.
        return launched


def _closing_on_write(worker):
    async def write(**_):
        asyncio.ensure_future(worker.close())
        return None  # what Dask answers for a handler the worker no longer has
    return write


def _assert_lost_on(error, buf, homes, victim):
    assert isinstance(error, dgvm.ChunkLost), repr(error)
    held = sorted(k for k, w in enumerate(homes) if w == victim)
    assert f"chunks {held} of allocation {buf.alloc_id} were on worker {victim}" in str(error), str(error)


def _write_as_it_closes(cluster, client, stand_in, replicas=None):
    """A buffer over the three workers; its write as the home of chunk 1 closes (``stand_in``
    installs what the closing worker does); (buffer, homes, victim, data, the error or None)."""
    buf = dgvm.malloc(BYTES, chunk_bytes=CHUNK, placement="round_robin", client=client, replicas=replicas)
    homes = buf.homes()
    assert len(set(homes)) == 3
    victim = homes[1]
    stand_in(_worker(cluster, victim))
    data = np.arange(BYTES, dtype=np.uint32).view(np.uint8)[:BYTES]
    try:
        buf.write(0, data)
    except Exception as e:  # noqa: BLE001
        return buf, homes, victim, data, e
    return buf, homes, victim, data, None


def test_a_write_whose_own_request_broke_as_its_worker_closed_raises_chunklost(cluster):
    c, client = cluster
    buf, homes, victim, data, error = _write_as_it_closes(
        c, client, lambda w: setattr(w, "scheduler", _ClosingOnLaunched(w)))
    _assert_lost_on(error, buf, homes, victim)
    kept = [k for k, w in enumerate(homes) if w != victim]
    for k in kept:  # what the other workers hold was written
        np.testing.assert_array_equal(buf.read(k * CHUNK, CHUNK), data[k * CHUNK:(k + 1) * CHUNK])
    buf.free()


def test_a_write_a_worker_answered_once_its_store_closed_raises_chunklost(cluster):
    c, client = cluster

    def stand_in(w):
        w.handlers[messages.WRITE] = _closing_on_write(w)

    buf, homes, victim, data, error = _write_as_it_closes(c, client, stand_in)
    _assert_lost_on(error, buf, homes, victim)  # not a write that silently did nothing
    buf.free()


def test_a_write_to_a_closing_home_with_a_copy_is_written_at_its_new_home(cluster):
    c, client = cluster
    buf, homes, victim, data, error = _write_as_it_closes(
        c, client, lambda w: setattr(w, "scheduler", _ClosingOnLaunched(w)), replicas=2)
    assert error is None, repr(error)
    assert victim not in buf.homes()
    np.testing.assert_array_equal(buf.read(0, BYTES), data)
    buf.free()


def test_an_allocation_placed_on_a_worker_as_it_closes_goes_to_the_others(cluster):
    """The scheduler's own request to a closing worker answers ``None`` (its store gone):
    not an allocation made there, which would be lost as the worker leaves, but one
    placed again on the workers that stay."""
    c, client = cluster
    victim = sorted(w.address for w in c.workers.values())[0]
    worker = _worker(c, victim)

    async def allocate(**_):
        asyncio.ensure_future(worker.close())
        return None  # what Dask answers for a handler the worker no longer has
    worker.handlers[messages.STORE_ALLOCATE] = allocate
    buf = dgvm.malloc(BYTES, chunk_bytes=CHUNK, placement="round_robin", client=client)
    assert victim not in buf.homes() and len(buf.homes()) == 3
    data = np.arange(BYTES, dtype=np.uint8)
    buf.write(0, data)
    np.testing.assert_array_equal(buf.read(0, BYTES), data)
    buf.free()


def test_a_move_to_a_worker_as_it_closes_raises_a_dgvm_error_and_keeps_the_data(cluster):
    """A pull the target answers ``None`` (its store gone) is a ``ConnectionBroke``, not a
    raw decoding error; the chunks stay where they were, their data intact."""
    c, client = cluster
    buf = dgvm.malloc(BYTES, chunk_bytes=CHUNK, placement="round_robin", client=client)
    data = np.arange(BYTES, dtype=np.uint8)
    buf.write(0, data)
    homes = buf.homes()
    target = homes[1]
    worker = _worker(c, target)

    async def pull(**_):
        return None  # what Dask answers for a handler the worker no longer has
    worker.handlers[messages.PULL] = pull
    with pytest.raises(dgvm.DgvmError, match="no longer serves"):
        buf.migrate([0], target)
    assert buf.homes()[0] == homes[0]
    np.testing.assert_array_equal(buf.read(0, BYTES), data)
    buf.free()


@pytest.mark.parametrize("replicas", [None, 2])
def test_a_task_that_reaches_a_worker_as_it_closes_is_stranded_not_failed_there(cluster, replicas):
    """A worker closing has torn its store down while the client's connection to it is
    still open (here its close is held there): a task that comes on it does not run, and
    the worker closes that connection at once, so that the task and the one sent behind
    it are stranded as on a worker that died: once the worker is gone, they run again
    where copies of its chunks took over, or fail with ``ChunkLost`` naming the chunks
    that went; never with an error of the missing store."""
    import threading
    import time

    import dgvm.array as dnp
    from dgvm.client.direct import DirectPlane
    from dgvm.client.session import session_of

    c, client = cluster
    h = np.arange(12 * 4, dtype=np.float64).reshape(12, 4)
    x = dnp.from_numpy(h, chunks=(4, 4), placement="round_robin", replicas=replicas)
    (x + 1).wait()  # (the client's connections to every worker are open)
    victim = x.alloc.homes()[1]
    worker = _worker(c, victim)
    plugin = worker.plugins[messages.STORE_PLUGIN]
    store = plugin.store
    close, release = store.close, threading.Event()

    def held_close():  # (the window between the store's teardown and the worker's end)
        release.wait(60)
        close()

    store.close = held_close
    asyncio.run_coroutine_threadsafe(worker.close(), worker.loop.asyncio_loop)
    try:
        deadline = time.monotonic() + 10
        while plugin.store is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert plugin.store is None
        x *= 2
        x.persist()  # (sent at once, and the next write's task there right behind: its follower)
        x += 1
        x.persist()
        channels = session_of(client).part(DirectPlane).channels
        deadline = time.monotonic() + 10
        while victim in channels and time.monotonic() < deadline:
            time.sleep(0.01)
        assert victim not in channels, "the closing worker kept its client's connection open"
    finally:
        release.set()
    if replicas is None:
        with pytest.raises(dgvm.ChunkLost, match=f"worker {victim}"):
            x.wait()
    else:
        x.wait()  # (its tasks run again where x's copies took over)
        np.testing.assert_array_equal(dnp.asnumpy(x), h * 2 + 1)
