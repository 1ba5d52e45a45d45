"""A chunk's home pushes the rows another worker's tasks read of it (a stencil's halo) to
that worker when a task of it waits for the writer (``dgvm.worker.pushes``): named by
the client with the writer, or asking when it ended (``dispatch.peers``). A task takes
pushed rows only when they are exactly what it must read (its client names the tasks of
other workers it follows that alone wrote those chunks: ``TaskChunks.last_writers``), and
asks the home otherwise. Results are NumPy's, with pushes taken or refused."""

from __future__ import annotations

import asyncio
import threading
import time

import dask
import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.client.ordering import TaskChunks
from dgvm.protocol import messages
from dgvm.worker import pushes as pushes_module
from dgvm.worker.pushes import Pushes


def _pushed(client) -> int:
    return sum(s["pushed"] for s in dgvm.stats(client=client)["workers"].values())


def _remembered(client) -> int:
    def count(dask_worker):
        return dask_worker.plugins[messages.STORE_PLUGIN].pushes._remembered

    return sum(client.run(count).values())


def _step(u, v):
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])


def _np_step(u, v):
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])


def _steps_in_place(seed: int, wanted: bool = False):
    """Two 64 x 64 grids in blocks of 16 rows over the workers, after three steps that
    write v from u and copy it back into u; with ``wanted``, their NumPy twins too."""
    h = np.random.default_rng(seed).random((64, 64))
    u = dnp.from_numpy(h, chunks=(16, 64), placement="round_robin")
    v = dnp.zeros_like(u)
    wu, wv = h.copy(), np.zeros_like(h)
    for _ in range(3):
        _step(u, v)
        _np_step(wu, wv)
        u[1:-1, 1:-1] = v[1:-1, 1:-1] * 1.0
        wu[1:-1, 1:-1] = wv[1:-1, 1:-1]
    return (u, v, wu, wv) if wanted else (u, v, h)


@pytest.mark.parametrize("peers", [False, True], ids=["caller-orders", "peers"])
def test_steps_sent_back_to_back_take_their_neighbours_rows_pushed(case, peers):
    case.needs_workers(2, "rows are pushed between workers")
    n, rows = 96, 24
    h = np.random.default_rng(5).random((n, n))
    with dask.config.set({"dgvm.dispatch.peers": peers}):
        u = dnp.from_numpy(h, chunks=(rows, n), placement="round_robin")
        v = dnp.from_numpy(h, chunks=(rows, n), placement="round_robin")
        assert len(set(u.alloc.homes())) > 1
        before = _pushed(case.client)
        wu, wv = h.copy(), h.copy()
        for _ in range(12):  # (nothing waited for: each step follows the last one's tasks)
            _step(u, v)
            _np_step(wu, wv)
            u, v, wu, wv = v, u, wv, wu
        np.testing.assert_allclose(dnp.asnumpy(u), wu, rtol=1e-12)
        np.testing.assert_allclose(dnp.asnumpy(v), wv, rtol=1e-12)
    # The first steps ask (their homes remember what they read); later ones find their
    # rows pushed, as long as the push comes before the step's read.
    assert _pushed(case.client) > before
    u.free()
    v.free()
    assert _remembered(case.client) == 0  # (a free forgets them)


def _held(client) -> int:
    return sum(client.run(lambda dask_worker: len(dask_worker.plugins[messages.STORE_PLUGIN].pushes.received)).values())


def test_a_pushed_row_is_not_taken_after_a_write_that_was_not_pushed(case):
    """Rows pushed for a task that did not read them are stale once a later task wrote the
    chunk without a push (here the homes stop pushing): the next step follows that task,
    not the one whose rows are held, and asks the homes."""
    if case.backend != "cpu":
        pytest.skip("stops the pushes of in-process workers")
    u, v, wu, wv = _steps_in_place(9, wanted=True)
    # Follows u's writers and reads only the rows above each block: the rows below, read
    # by the steps before and pushed for this one too, stay held.
    v[1:-1, 1:-1] = u[:-2, 1:-1] * 1.0
    wv[1:-1, 1:-1] = wu[:-2, 1:-1]
    np.testing.assert_allclose(dnp.asnumpy(v), wv, rtol=1e-12)
    deadline = time.monotonic() + 30  # (pushes travel beside the tasks)
    while not _held(case.client) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _held(case.client) > 0

    stores = [w.plugins[messages.STORE_PLUGIN] for w in case.cluster.workers.values()]
    saved = [s.pushes.after_task for s in stores]
    try:
        for s in stores:
            s.pushes.after_task = lambda key, wrote, readers: None
        u += 1.0  # every chunk of u written: no push of it
        wu += 1.0
        _step(u, v)  # follows ``u += 1``: the rows held are older
        _np_step(wu, wv)
        np.testing.assert_allclose(dnp.asnumpy(v), wv, rtol=1e-12)
    finally:
        for s, f in zip(stores, saved):
            s.pushes.after_task = f
    u.free()
    v.free()


def test_a_chunk_no_task_of_another_worker_waits_to_read_is_not_pushed(case):
    case.needs_workers(2, "rows are pushed between workers")
    u, v, h = _steps_in_place(2)
    h = dnp.asnumpy(u)
    assert _remembered(case.client) > 0  # (the homes know who read what)
    keys = set()
    for _ in range(4):  # written, never read across chunks
        u *= 1.5
        keys |= {f.key for f in u.pending.writes}
        u.wait()  # (each write its own task: a deferred chain would be one)
    np.testing.assert_allclose(dnp.asnumpy(u)[0, :4], h[0, :4] * 1.5 ** 4)
    pushed = case.client.run(lambda dask_worker: [k for k, _ in dask_worker.plugins[messages.STORE_PLUGIN].pushes.recent])
    assert keys and not keys & {k for ks in pushed.values() for k in ks}
    u.free()
    v.free()


def test_with_push_pieces_off_nothing_is_pushed(case):
    case.needs_workers(2, "rows are pushed between workers")
    n, rows = 64, 16
    h = np.random.default_rng(4).random((n, n))
    with dask.config.set({"dgvm.transfer.push-pieces": False}):
        u = dnp.from_numpy(h, chunks=(rows, n), placement="round_robin")
        v = dnp.zeros_like(u)
        before = _pushed(case.client)
        wu, wv = h.copy(), np.zeros_like(h)
        for _ in range(6):
            _step(u, v)
            _np_step(wu, wv)
            u, v, wu, wv = v, u, wv, wu
        np.testing.assert_allclose(dnp.asnumpy(u), wu, rtol=1e-12)
        assert _pushed(case.client) == before
    u.free()
    v.free()


# -- the rules, without a cluster ----------------------------------------------------------

class _Task:
    """What ``last_writers`` reads of a direct task."""

    def __init__(self, key, worker):
        self.key, self.worker = key, worker


def test_only_the_last_writer_of_a_chunk_is_named():
    chunks = TaskChunks()
    last7, last8 = {}, {}
    a, b, c, d = _Task("a", "w1"), _Task("b", "w2"), _Task("c", "w2"), _Task("d", "w3")
    chunks.wrote([a, b], 7, [[0, 1], [2, 3]], last7)
    chunks.wrote([c], 7, [[3]], last7)  # written after b
    chunks.wrote([d], 8, [[0]], last8)
    # c wrote chunk 3 of allocation 7 after b: b is named for chunk 2 only, whether the task
    # follows c too or c finished before it was submitted (then it follows b alone); a
    # runs where the task runs.
    assert chunks.last_writers([a, b, c, d], "w1") == {"b": ["w2", 7, [2]], "c": ["w2", 7, [3]], "d": ["w3", 8, [0]]}
    assert chunks.last_writers([b], "w9") == {"b": ["w2", 7, [2]]}
    # A task whose writes are not recorded may have written anything: nothing is named;
    # a reduction writes nothing.
    assert chunks.last_writers([b, _Task("x", "w4")], "w1") == {}
    r = _Task("r", "w4")
    chunks.wrote_nothing([r])
    assert chunks.last_writers([b, r], "w1") == {"b": ["w2", 7, [2]]}
    # A write whose chunks are not known (``map_chunks``) leaves no chunk a known last writer.
    last7.clear()
    assert chunks.last_writers([b, c], "w1") == {}


class _Worker:
    address = "tcp://reader"


def _piece(index: int, key: str, value: int, alloc_id: int = 7) -> dict:
    return {"alloc_id": alloc_id, "index": index, "span": [8, 16], "key": key, "source": "tcp://home",
            "desc": {"data": np.full(8, value, dtype=np.uint8), "nbytes": 64, "start": 8, "writes": value}}


def test_pushed_bytes_are_taken_only_with_the_task_and_worker_that_wrote_them():
    p = Pushes(_Worker(), plugin=None)
    assert p.pushed([_piece(1, "K", 3)]) == 1
    fresh = {"K": ("tcp://home", 7, frozenset({1}))}
    assert p.take(7, 1, 8, 16, fresh)["writes"] == 3
    assert p.take(7, 1, 8, 16, {"J": ("tcp://home", 7, frozenset({1}))}) is None  # another writer
    assert p.take(7, 1, 8, 16, {"K": ("tcp://other", 7, frozenset({1}))}) is None  # another worker
    assert p.take(7, 1, 8, 16, {"K": ("tcp://home", 7, frozenset({2}))}) is None  # not its chunk
    assert p.take(7, 1, 8, 16, {"K": ("tcp://home", 6, frozenset({1}))}) is None  # not its allocation
    assert p.take(7, 1, 0, 16, fresh) is None  # other bytes
    assert p.take(7, 1, 8, 16, {}) is None
    assert p.take(7, 1, 8, 16, fresh) is None  # (taken: no longer kept)
    p.pushed([_piece(1, "K", 3), _piece(2, "K", 3)])
    p.pushed([_piece(1, "L", 4)])  # a later write's: the last one pushed is kept
    assert p.take(7, 1, 8, 16, fresh) is None
    assert p.usable(7, 1, 8, 16, {"L": ("tcp://home", 7, frozenset({1}))})
    assert p.take(7, 1, 8, 16, {"L": ("tcp://home", 7, frozenset({1}))})["writes"] == 4
    p.peer_left("tcp://home")  # (a worker registered at its address later is another)
    assert not p.usable(7, 2, 8, 16, {"K": ("tcp://home", 7, frozenset({2}))}) and not p.received


class _Stream:
    comm = None

    def send(self, message):
        pass


class _Home:
    address = "tcp://home"
    executor = None
    batched_stream = _Stream()

    def log_event(self, topic, msg):
        pass


class _Plugin:
    """The chunk store's part ``DirectTasks`` and ``Pushes`` use: a piece is read whole."""

    def __init__(self, worker):
        self.pushes = Pushes(worker, self)

    async def read_exports(self, alloc_id, indices, path, to, span=None):
        return [{"data": np.arange(span[0], span[1], dtype=np.uint8), "nbytes": 64, "start": span[0], "writes": 1}]


_GATE = threading.Event()  # (a module's: the task body is pickled by reference)


def _writes_chunk_1(indices, results):
    from dgvm.worker import direct

    _GATE.wait(10)
    direct.running()[2].append(({"alloc_id": 7, "wrote": [1]}, False, 0))  # its report: wrote chunk 1


def test_rows_go_to_the_workers_named_with_the_writer_and_with_the_answer_to_a_question():
    """Rows of a chunk a task wrote go on their own to the workers its client named (in
    its message, or in a ``push`` message while it runs, or after it ended), and with the
    answer to a worker that asks when it ended (``ended_here``)."""
    from distributed.protocol import pickle

    from dgvm.worker.direct import DirectTasks

    async def main():
        home = _Home()
        plugin = _Plugin(home)
        tasks = DirectTasks(home, plugin)
        for reader in ("tcp://reader", "tcp://named", "tcp://later", "tcp://after"):
            plugin.pushes.remember(7, 1, [8, 16], reader)
        alone = []

        async def push(key, wrote, chunks, reader):
            if any(set(idx) & set(chunks) for _, idx in wrote):
                alone.append((key, reader))

        plugin.pushes._push = push
        _GATE.clear()
        answers = []
        tasks._start({"key": "W", "after": [], "peers": {}, "task": pickle.dumps((_writes_chunk_1, ())),
                      "indices": [1], "results": None, "written": None, "push_to": {"tcp://named": [1]}},
                     answers.append)
        tasks._push_request("W", "tcp://later", [1])  # (a reader placed while W runs)
        tasks._push_request("W", "tcp://elsewhere", [2])  # (W is not the last writer of chunk 1 for it)
        asked = asyncio.ensure_future(tasks.ended_here(["W"], reader="tcp://reader", rows={"W": [1]}))
        await asyncio.sleep(0.05)
        _GATE.set()
        got = await asyncio.wait_for(asked, 10)
        tasks._push_request("W", "tcp://after", [1])  # (placed once W ended)
        await asyncio.sleep(0.01)
        plain = await asyncio.wait_for(tasks.ended_here(["W"], reader="tcp://reader"), 10)  # (no rows asked)
        return answers, got, alone, tasks.push_to, plain

    answers, got, alone, left, plain = asyncio.run(main())
    assert plain == {}
    assert answers == [{"key": "W", "result": None}]
    piece, = got["pushed"]
    assert (piece["alloc_id"], piece["index"], piece["span"], piece["key"], piece["source"]) == (7, 1, [8, 16], "W", "tcp://home")
    np.testing.assert_array_equal(piece["desc"]["data"], np.arange(8, 16))
    assert sorted(alone) == [("W", "tcp://after"), ("W", "tcp://later"), ("W", "tcp://named")]
    assert left == {}


def test_a_reader_keeps_pushed_bytes_within_its_bound_and_forgets_a_freed_allocation(monkeypatch):
    monkeypatch.setattr(pushes_module, "RECEIVED_BYTES", 20)
    monkeypatch.setattr(pushes_module, "REMEMBERED", 3)
    p = Pushes(_Worker(), plugin=None)
    for index in range(4):  # 8 bytes each: the oldest goes past 20
        p.pushed([_piece(index, "K", index)])
    assert [k[1] for k in p.received] == [2, 3]
    p.pushed([_piece(0, "K", 0, alloc_id=6)])
    assert [k[:2] for k in p.received] == [(7, 3), (6, 0)]
    p.forget(7)
    assert list(p.received) == [(6, 0, 8, 16)] and p._received_bytes == 8
    # As a home: the pieces of the chunks read longest ago go first; a reader that left and
    # a freed allocation are forgotten.
    for index, reader in [(0, "tcp://a"), (1, "tcp://a"), (0, "tcp://b"), (2, "tcp://b")]:
        p.remember(7, index, [0, 8], reader)
    assert {c: sorted(r) for c, r in p.read_by.items()} == {
        (7, 0): [(0, 8, "tcp://a"), (0, 8, "tcp://b")], (7, 2): [(0, 8, "tcp://b")]}
    p.peer_left("tcp://b")
    assert list(p.read_by) == [(7, 0)] and p._remembered == 1
    p.forget(7)
    assert not p.read_by and p._remembered == 0
