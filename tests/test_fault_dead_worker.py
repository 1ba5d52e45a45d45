"""A worker process killed: every call that waits on it answers within a bounded time, with
``ChunkLost`` naming the allocation, the chunks and the worker; a free of a damaged
allocation returns at once and frees what survives; the dead worker's shared-memory
arena is unlinked, and a closed cluster leaves none.

Workers in processes of their own (their nannies start a new one after each kill), one
cluster for the module. Every wait is bounded: a call runs in a thread joined with a
timeout, a condition is polled against a deadline."""

import asyncio
import math
import os
import re
import signal
import threading
import time

import dask
import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import drain_releases
from dgvm.protocol import messages
from dgvm.transfer import LeftPeers
from killing import process_cluster, running_on, until, workers

BOUND = 30.0  # seconds any one call may take once the scheduler removed the worker


@dgvm.kernel
def add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


@dgvm.kernel
def spin(n, out):
    """``n[i]`` steps for element i: with a huge ``n``, a task that runs until killed."""
    i = cuda.grid(1)
    if i < out.size:
        s = 0.0
        for k in range(n[i]):
            s += math.sqrt(k)
        out[i] = s


@pytest.fixture(scope="module")
def client():
    with process_cluster(n_workers=4) as client:
        yield client


def kill(client, address: str, racing=None):
    """SIGKILL the process of the worker at ``address``; return once the scheduler removed
    it. ``racing``: a call started right after the signal, before the scheduler knows;
    returns what ``bounded`` says of it."""
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    raced = {}
    if racing is not None:
        thread = threading.Thread(target=lambda: raced.update(r=bounded(racing)), daemon=True)
        thread.start()
    until(lambda: address not in workers(client), what=f"the scheduler removing {address}")
    if racing is not None:
        thread.join(BOUND)
        assert not thread.is_alive()
        return raced["r"]


def bounded(call, timeout: float = BOUND):
    """Run ``call()`` in a thread: (its result or the exception it raised, seconds)."""
    box = {}

    def run():
        t0 = time.perf_counter()
        try:
            box["out"] = call()
        except BaseException as e:  # noqa: BLE001
            box["out"] = e
        box["seconds"] = time.perf_counter() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{call} did not answer within {timeout} s"
    return box["out"], box["seconds"]


def assert_lost(error, alloc, worker: str) -> None:
    """``error`` is a ChunkLost naming ``worker`` and chunks of ``alloc`` it held (only those)."""
    assert isinstance(error, dgvm.ChunkLost), repr(error)
    text = str(error)
    held = {k for k, w in enumerate(alloc.homes()) if w == worker}
    named = [set(map(int, found.split(","))) for found in
             re.findall(r"chunks \[([\d, ]+)\] of allocation " + str(alloc.alloc_id) + r"\b", text)]
    assert worker in text and named and all(n <= held for n in named), (text, held)


def spread(client, n: int = 4000, chunks: int = 500):
    """arange(n) over every worker, chunk 1 not on the first worker holding chunk 0."""
    until(lambda: len(workers(client)) == 4, what="four workers")
    x = dnp.from_numpy(np.arange(float(n)), chunks=chunks, placement="round_robin")
    assert len(set(x.alloc.homes())) == 4
    w = dnp.ones(8, chunks=1, colocate=x)  # the kernels compiled on every worker first
    n = dnp.zeros(8, dtype=np.int64, chunks=1, colocate=x)
    dgvm.launch(add_one, w, out=w)
    dgvm.launch(spin, n, out=w)
    w.free()
    n.free()
    return x


def test_every_use_of_a_lost_chunk_raises_chunklost_at_once(client):
    x = spread(client)
    homes = x.alloc.homes()
    victim = homes[1]
    arena = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.shm_name,
                       workers=[victim])[victim]
    assert os.path.exists(f"/dev/shm/{arena}")
    dnp.asnumpy(x)  # the client has connections to every worker
    error, _ = kill(client, victim, racing=lambda: dnp.asnumpy(x))
    assert_lost(error, x.alloc, victim)  # a read as the worker died
    # What the worker did not hold is there.
    kept = [k for k, w in enumerate(homes) if w != victim]
    np.testing.assert_array_equal(dnp.asnumpy(x[500 * kept[-1]: 500 * kept[-1] + 500]),
                                  np.arange(500 * kept[-1], 500 * kept[-1] + 500.0))
    uses = {
        "read": lambda: dnp.asnumpy(x),
        "sum": lambda: float(x.sum()),
        "x + 1": lambda: (x + 1).wait(),
        "(x + 1).sum()": lambda: float((x + 1).sum()),
        "a slice": lambda: dnp.asnumpy(x[400:600]),
        "a launch": lambda: dgvm.launch(add_one, x, out=x) or x.wait(),
    }
    for name, use in uses.items():
        error, _ = bounded(use)
        assert_lost(error, x.alloc, victim), name
    until(lambda: not os.path.exists(f"/dev/shm/{arena}"), what="the dead worker's arena unlinked")
    error, seconds = bounded(x.free)
    assert error is None


def test_work_in_flight_when_a_worker_dies_answers_with_chunklost(client):
    x = spread(client)
    out = dnp.zeros(x.shape, chunks=500, colocate=x)
    victim = x.alloc.home(1)
    on_victim = np.repeat(np.array(x.alloc.homes()) == victim, 500)
    n = dnp.from_numpy(np.where(on_victim, 10**15, 0), chunks=500, colocate=x)
    y = (x * 2 + 1).persist()  # done soon; its chunks on the victim are lost with it
    y.wait()
    dgvm.launch(spin, n, out=out)  # runs until the victim is killed, done elsewhere
    total = {}
    reader = threading.Thread(target=lambda: total.update(r=bounded(lambda: float(out.sum()))), daemon=True)
    reader.start()  # a reduction waiting for the launch
    until(lambda: any("spin" in k for k in running_on(client, victim)),
          what="the launch running on the victim")
    kill(client, victim)
    reader.join(BOUND)
    assert not reader.is_alive()
    assert isinstance(total["r"][0], dgvm.ChunkLost), total  # the first call to wait hears it
    error, _ = bounded(out.wait)
    assert error is out  # raised once, as any failure; out's lost chunks still say so:
    error, _ = bounded(lambda: dnp.asnumpy(out))
    assert_lost(error, out.alloc, victim)
    error, _ = bounded(lambda: dnp.asnumpy(y))
    assert_lost(error, y.alloc, victim)
    for a in (x, out, y, n):
        assert bounded(a.free)[0] is None


def test_an_array_that_lost_nothing_stays_usable_after_an_operation_on_lost_chunks(client):
    x = spread(client)
    victim = x.alloc.home(1)
    safe = next(w for w in x.alloc.homes() if w != victim)
    out = dnp.from_numpy(np.full(4000, 7.0), chunks=500, colocate=x)
    out.migrate(list(range(8)), safe)  # out keeps every chunk
    kill(client, victim)
    error, _ = bounded(lambda: dgvm.launch(add_one, x, out=out) or out.wait())
    assert_lost(error, x.alloc, victim)  # raised once, as any failure
    # out lost nothing: it reads, takes writes and launches again, as after a failed kernel
    # (before, every later use raised the old ChunkLost).
    assert bounded(lambda: dnp.asnumpy(out))[0].shape == (4000,)
    h = np.arange(4000.0) * 3
    out[...] = h
    np.testing.assert_array_equal(bounded(lambda: dnp.asnumpy(out))[0], h)
    dgvm.launch(add_one, out, out=out)
    np.testing.assert_array_equal(bounded(lambda: dnp.asnumpy(out))[0], h + 1)
    for a in (x, out):
        assert bounded(a.free)[0] is None


def test_an_array_written_on_the_worker_that_left_and_moved_off_it_lost_nothing(client):
    x = spread(client)
    victim, safe = x.alloc.home(1), x.alloc.home(0)
    y = dnp.zeros(4000, chunks=500, colocate=x)
    dgvm.launch(add_one, x, out=y)  # its tasks run on every worker, the victim too
    y.wait()
    y.migrate(list(range(8)), safe)  # y holds nothing there now
    kill(client, victim)
    # Dask computes the launch's finished task again where its result was held, and the
    # scheduler fails it there: no one's failure (before, y's next use raised it).
    np.testing.assert_array_equal(bounded(lambda: dnp.asnumpy(y))[0], np.arange(4000.0) + 1)
    dgvm.launch(add_one, y, out=y)
    assert float(bounded(lambda: y.sum())[0]) == float((np.arange(4000.0) + 2).sum())
    for a in (x, y):
        assert bounded(a.free)[0] is None


@pytest.fixture
def tasks_plane():
    """Dask's task path (``dgvm.dispatch.plane: tasks``): the tests of what Dask does with
    the results of tasks whose worker left (the direct plane keeps none on workers)."""
    with dask.config.set({"dgvm.dispatch.plane": "tasks"}):
        yield


def test_a_task_that_followed_one_failed_since_is_not_waited_for_for_ever(client, tasks_plane):
    x = spread(client)
    steps = dnp.from_numpy(np.full(4000, 20000), chunks=500, colocate=x)
    y = dnp.zeros(4000, chunks=500, colocate=x)
    z = dnp.zeros(4000, chunks=500, colocate=x)
    dgvm.launch(spin, steps, out=y)  # a while on every worker
    dgvm.launch(add_one, y, out=z, halo=1)  # each of its tasks follows every task of y's
    z.wait()
    client.amm.run_once()  # Dask keeps one copy of each task's result: where it ran
    ys = [f.key for f in y.pending.writes]
    held = client.run_on_scheduler(lambda dask_scheduler: {
        k: sorted(ws.address for ws in dask_scheduler.tasks[k].who_has) for k in ys})
    first = next(h[0] for h in held.values() if len(h) == 1)
    second = next(w for w in x.alloc.homes() if w != first)
    k = next(i for i, w in enumerate(x.alloc.homes()) if w not in (first, second))
    kept = dnp.asnumpy(z[500 * k: 500 * k + 500])
    kill(client, first)  # y's finished task there fails (its result went with it)
    kill(client, second)  # z's task there followed it: Dask leaves it released, wanted
    got, _ = bounded(lambda: dnp.asnumpy(z[500 * k: 500 * k + 500]))
    np.testing.assert_array_equal(got, kept)
    # A wait passes over the tasks that ran; before, z's free waited for that one for ever.
    assert bounded(lambda: z.wait())[0] is z
    for a in (x, steps, y, z):
        assert bounded(lambda: a.free())[0] is None


def _holders(dask_scheduler, keys) -> dict:
    return {k: {ws.address for ws in dask_scheduler.tasks[k].who_has or ()} for k in keys}


def _measure(dask_scheduler, value: str) -> str:
    """Set how Dask's memory manager measures a worker's memory; return the measure before."""
    amm = dask_scheduler.extensions["amm"]
    before, amm.measure = amm.measure, value
    return before


def _pinned(dask_scheduler, keys) -> dict:
    return {k: next(iter(dask_scheduler.tasks[k].worker_restrictions)) for k in keys}


def test_a_released_array_is_freed_when_the_worker_holding_a_copy_of_its_writers_result_dies(client, tasks_plane):
    """A task's result is copied to the workers of the tasks that follow it, and Dask's
    memory manager keeps one copy: the one where the task ran. Were it the other, that
    worker's death would lose the result of a task whose worker lives: with a task it
    followed failed since, Dask never computes it again, and the release of the array it
    wrote would wait for it for ever (the allocation stays in the GVAT)."""
    x = spread(client)
    w0, w1, w2, w3 = x.alloc.homes()[:4]
    client.amm.stop()  # it runs once below, when the copies are in place
    measure = client.run_on_scheduler(_measure, value="managed")
    try:
        steps = dnp.from_numpy(np.full(4000, 20000), chunks=500, colocate=x)
        y = dnp.zeros(4000, chunks=500, colocate=x)
        t = dnp.zeros(4000, chunks=500, colocate=x)
        dgvm.launch(spin, steps, out=y)  # a while on every worker
        dgvm.launch(add_one, y, out=t, halo=1)  # each task follows every task of y's: their results go everywhere
        t.wait()
        ys, ts = [f.key for f in y.pending.writes], [f.key for f in t.pending.writes]
        pinned = client.run_on_scheduler(_pinned, keys=ys + ts)
        p3 = next(k for k in ys if pinned[k] == w3)
        a2 = next(k for k in ts if pinned[k] == w2)
        ballast = client.scatter(bytes(1 << 20), workers=[w2])  # w2 the fuller: Dask drops copies there first

        def copies(dask_scheduler):
            # y's task on w3 keeps its result there alone; t's task on w2 gets a copy on w1,
            # as a task of w1 that followed it would fetch.
            for ws in list(dask_scheduler.tasks[p3].who_has):
                if ws.address != w3:
                    dask_scheduler.request_remove_replicas(ws.address, [p3], stimulus_id="test-drop")
            dask_scheduler.request_acquire_replicas(w1, [a2], stimulus_id="test-acquire")

        client.run_on_scheduler(copies)
        until(lambda: client.run_on_scheduler(_holders, keys=[p3, a2]) == {p3: {w3}, a2: {w1, w2}},
              what="the copies in place")
        client.amm.run_once()
        until(lambda: len(client.run_on_scheduler(_holders, keys=[a2])[a2]) == 1, what="one copy of t's result")
        kill(client, w3)  # y's task there fails: it ran there, its result went with it
        until(lambda: client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.tasks[p3].state) == "erred",
              what="y's task on the worker that left failing")
        kill(client, w1)  # the copy of t's result on w2's task goes
        alloc_id = t.alloc.alloc_id
        del t
        drain_releases(timeout=10)
        assert alloc_id not in {a.alloc_id for a in dgvm.table(client=client)}
        del ballast
        for a in (x, steps, y):
            assert bounded(a.free)[0] is None
        drain_releases()
        assert dgvm.table(client=client) == []
    finally:
        client.run_on_scheduler(_measure, value=measure)
        client.amm.start()


def test_the_surviving_chunks_of_a_damaged_array_take_writes(client):
    x = spread(client)
    victim = x.alloc.home(1)
    k = next(i for i, w in enumerate(x.alloc.homes()) if w != victim)
    kill(client, victim)
    x[500 * k: 500 * k + 500] = -1.0  # a task on the worker of chunk k alone
    np.testing.assert_array_equal(bounded(lambda: dnp.asnumpy(x[500 * k: 500 * k + 500]))[0], -np.ones(500))
    error, _ = bounded(lambda: dnp.asnumpy(x))
    assert_lost(error, x.alloc, victim)
    assert bounded(x.free)[0] is None


def maps(client, worker: str) -> str:
    return client.run(lambda: open("/proc/self/maps").read(), workers=[worker])[worker]


def test_survivors_stop_mapping_the_arena_of_a_worker_that_left(client):
    x = spread(client)
    victim, other = x.alloc.home(1), x.alloc.home(0)
    arena = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.shm_name,
                       workers=[victim])[victim]
    x.migrate(1, other)  # copied through the victim's arena, which the other maps from then on
    assert arena in maps(client, other)
    kill(client, victim)
    # Unlinked, the arena's pages stay as long as a process maps them.
    until(lambda: arena not in maps(client, other), what="the survivor unmapping the dead worker's arena")
    assert bounded(x.free)[0] is None


def test_free_of_a_damaged_allocation_returns_at_once_and_frees_what_survives(client):
    x = spread(client)
    victim = x.alloc.home(1)
    dgvm.launch(add_one, x, out=x)  # tasks on it, finished: Dask would compute them again
    x.wait()
    kill(client, victim)
    error, seconds = bounded(x.free)
    assert error is None and seconds < 5, (error, seconds)
    drain_releases()
    assert dgvm.table(client=client) == []
    used = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.used)
    assert set(used.values()) == {0}, used


def test_a_worker_its_nanny_starts_after_dasks_lost_worker_timeout_joins_and_stays(client):
    """A nanny slower to start a new worker than Dask's lost-worker timeout (a loaded
    machine; here the timeout is shorter than any start) is not closed by the cluster:
    before, its new worker never came, or left as it registered with what had been placed
    on it, and the cluster stayed a worker short."""
    until(lambda: len(workers(client)) == 4, what="four workers")
    victim = sorted(workers(client))[0]
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "1ms"}):
        kill(client, victim)
        until(lambda: len(workers(client)) == 4, timeout=2 * BOUND, what="the nanny's new worker")
    x = dnp.from_numpy(np.arange(4000.0), chunks=500, placement="round_robin")
    assert len(set(x.alloc.homes())) == 4
    np.testing.assert_array_equal(dnp.asnumpy(x + 1), np.arange(4000.0) + 1)
    x.free()


def test_a_closed_cluster_leaves_no_arena_behind():
    cluster = dgvm.LocalCluster(n_workers=2, backend="cpu", processes=True, device_memory="16MiB",
                                dashboard_address=None)
    client = dgvm.connect(cluster)
    names = set()

    def arenas():
        found = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.shm_name)
        names.update(found.values())
        return found

    try:
        victim = next(iter(arenas()))
        x = dnp.ones(1000, chunks=100, placement="round_robin")
        kill(client, victim)
        until(lambda: len(workers(client)) == 2, what="the nanny's new worker")
        arenas()
        assert len(names) == 3
        del x
    finally:
        client.close()
        cluster.close()
    assert [n for n in names if os.path.exists(f"/dev/shm/{n}")] == []


def test_an_allocation_placed_as_a_worker_dies_goes_to_the_others():
    cluster = dgvm.LocalCluster(n_workers=3, backend="cpu", processes=False, device_memory="16MiB",
                                dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        doomed = sorted(workers(client))[0]

        def dies_as_it_allocates(dask_worker):
            async def dying(**_):  # the scheduler's request breaks with the worker
                await dask_worker.close()
                await asyncio.Event().wait()
            dask_worker.handlers[messages.STORE_ALLOCATE] = dying

        client.run(dies_as_it_allocates, workers=[doomed])
        # Before, the scheduler's OSError went out of its handler, and Dask closed the
        # caller's connection: a raw CommClosedError.
        buf, _ = bounded(lambda: dgvm.malloc(6 * 1024, chunk_bytes=1024, placement="round_robin"))
        assert isinstance(buf, dgvm.GlobalBuffer), repr(buf)
        assert doomed not in set(buf.homes()) and len(set(buf.homes())) == 2
        buf.write(0, np.arange(6 * 1024, dtype=np.uint8))
        np.testing.assert_array_equal(buf.read(0, 6 * 1024), np.arange(6 * 1024, dtype=np.uint8))
        buf.free()
    finally:
        client.close()
        cluster.close()


def test_a_request_whose_connection_breaks_as_its_peer_dies_says_the_peer_left():
    async def scenario(news: bool):
        peers = LeftPeers()

        async def broken():
            raise ConnectionResetError("reset by peer")

        loop = asyncio.get_running_loop()
        if news:  # the scheduler's word comes a moment after the connection broke
            loop.call_later(0.05, peers.left, "tcp://a:1")
        await peers.call("tcp://a:1", broken(), lambda: ConnectionError("a left"), grace=5.0 if news else 0.1)

    with pytest.raises(ConnectionError, match="a left"):
        asyncio.run(scenario(news=True))
    with pytest.raises(ConnectionResetError, match="reset by peer"):  # no news: as it was
        asyncio.run(scenario(news=False))


def test_a_refusal_from_a_peer_is_raised_at_once_not_taken_for_a_broken_connection():
    """``AccessDenied`` is a ``PermissionError`` (an ``OSError``), but it is the peer's
    answer: no wait for news that the peer left (the grace would hold it for an hour)."""
    async def scenario():
        async def refused():
            raise dgvm.AccessDenied("allocation 1 belongs to 'a', not 'b'")

        await asyncio.wait_for(LeftPeers().call("tcp://a:1", refused(), lambda: ConnectionError("a left"),
                                                grace=3600.0), BOUND)

    with pytest.raises(dgvm.AccessDenied, match="belongs to"):
        asyncio.run(scenario())


def test_a_closing_peer_is_waited_for_a_peer_passing_on_a_broken_request_is_not():
    """A peer that answers nothing (``PeerClosing``: its handlers are gone) is leaving: the
    news is waited for, and ``gone()`` raised once it comes. A ``ConnectionBroke`` that a
    live peer passes on from its own request to another process is its answer: raised at
    once (the grace would hold it for an hour)."""
    from dgvm.protocol.errors import ConnectionBroke, PeerClosing

    async def scenario(error):
        peers = LeftPeers()

        async def answer():
            raise error

        asyncio.get_running_loop().call_later(0.05, peers.left, "tcp://a:1")
        await asyncio.wait_for(peers.call("tcp://a:1", answer(), lambda: ConnectionError("a left"),
                                          grace=3600.0), BOUND)

    with pytest.raises(ConnectionError, match="a left"):
        asyncio.run(scenario(PeerClosing("tcp://a:1 no longer serves dgvm_export: it is closing")))
    with pytest.raises(ConnectionBroke, match="to c broke"):
        asyncio.run(scenario(ConnectionBroke("dgvm_pull: a connection to c broke")))


def test_a_request_to_a_peer_stops_waiting_when_the_peer_leaves():
    async def scenario():
        peers = LeftPeers()
        never = asyncio.get_running_loop().create_future()  # a connection that never answers
        waiting = asyncio.ensure_future(peers.call("tcp://a:1", never, lambda: ConnectionError("a left")))
        answered = await peers.call("tcp://b:1", asyncio.sleep(0, "b's answer"), lambda: ConnectionError("b left"))
        await asyncio.sleep(0)
        assert not waiting.done()
        peers.left("tcp://b:1")  # another peer: nothing changes
        await asyncio.sleep(0)
        assert not waiting.done()
        peers.left("tcp://a:1")
        with pytest.raises(ConnectionError, match="a left"):
            await asyncio.wait_for(waiting, 5)
        assert never.cancelled()  # the request itself goes
        return answered

    assert asyncio.run(scenario()) == "b's answer"
