"""The worker's side of ordering across workers on the direct plane (``DirectTasks``),
without a cluster: a task whose peer cannot say when the tasks it follows ended goes back
to its client unready, and a worker asked about a task that went back unready never
calls it ended (its followers there would run before it); when a task asks the other
workers, which tasks count as ready behind a running one (so that it may leave its device
work running), and that a task that then does not run waits for that work."""

from __future__ import annotations

import asyncio
import threading

import pytest

from distributed.protocol import pickle

from dgvm.worker.direct import DirectTasks


class _Rpc:
    async def dgvm_direct_ended(self, **kwargs):
        raise OSError("that worker is gone")


class _Worker:
    address = "tcp://here"
    executor = None

    def rpc(self, address):
        return _Rpc()

    def log_event(self, topic, msg):
        self.logged.append(msg)


def _noop(indices, results):
    return None


def _msg(key, after, peers=None):
    return {"key": key, "after": after, "peers": peers or {}, "task": pickle.dumps((_noop, ())),
            "indices": [], "results": None, "written": None}


def test_a_task_sent_back_unready_is_not_ended_for_those_that_ask():
    async def main():
        worker = _Worker()
        worker.logged = []
        tasks = DirectTasks(worker, plugin=None)
        answers = []
        tasks._start({"key": "U", "after": [], "peers": {"tcp://gone": ["A"]},
                      "task": pickle.dumps((_noop, ())), "indices": [], "results": None, "written": None},
                     answers.append)
        asked = await asyncio.wait_for(tasks.ended_here(["U"]), 5)  # (it asks while U waits)
        follower = []
        tasks._start({"key": "F", "after": ["U"], "peers": {}, "task": pickle.dumps((_noop, ())),
                      "indices": [], "results": None, "written": None}, follower.append)
        await asyncio.sleep(0.05)
        return answers, asked, follower, worker.logged

    answers, asked, follower, logged = asyncio.run(main())
    assert answers == [{"key": "U", "unready": True}]
    assert asked == {"unknown": ["U"]}  # not {}: U never ran
    assert follower == [{"key": "F", "unready": True}]  # its follower here goes back too
    assert logged == []  # neither ran: nothing for the dashboard


def test_a_task_counts_as_ready_behind_a_running_one_only_if_it_runs_right_after_it():
    """A task that waits for a task running on this worker lets that one leave its device
    work running (``DirectTasks.ready``) only when it will run as soon as that one ends
    (and other workers answer, asked meanwhile): not one behind a task not running yet,
    or one that follows a task that failed (it will not run)."""
    async def main():
        loop = asyncio.get_running_loop()
        worker = _Worker()
        worker.logged = []
        tasks = DirectTasks(worker, plugin=None)
        for key in ("R", "X"):  # R runs here now; X has arrived and waits
            tasks.ended[key] = loop.create_future()
        tasks.running.add("R")
        tasks.failed["Q"] = {"exception": "boom"}
        answers, seen = [], []
        for m in (_msg("G", ["X"]), _msg("H", ["Q", "R"]), _msg("P", ["R"], {"tcp://gone": ["A"]})):
            tasks._start(m, answers.append)
            await asyncio.sleep(0.01)
            seen.append(tasks.ready())
        tasks.running.discard("R")
        seen.append(tasks.ready())  # R no longer runs: P waits behind nothing running
        for key in ("R", "X"):
            tasks.ended.pop(key).set_result(None)
        deadline = loop.time() + 10
        while len(answers) < 3 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return seen, answers, tasks.behind

    seen, answers, behind = asyncio.run(main())
    assert seen == [False, False, True, False]
    assert {a["key"] for a in answers} == {"G", "P", "H"} and behind == {}
    # P's question failed (that worker is gone): it went back to its client unrun.
    assert {a["key"] for a in answers if a.get("unready")} == {"P"}


def test_a_task_asked_about_by_another_worker_leaves_no_work_running_for_it():
    """A task of another worker waiting for the one running here does not count as ready
    behind it (``ready``): nothing here would wait for the work it left running."""
    async def main():
        loop = asyncio.get_running_loop()
        tasks = DirectTasks(_Worker(), plugin=None)
        tasks.ended["R"] = loop.create_future()
        tasks.running.add("R")
        asked = asyncio.ensure_future(tasks.ended_here(["R"]))
        await asyncio.sleep(0.01)
        during = tasks.ready()
        tasks.running.discard("R")
        tasks.finished["R"] = None
        tasks.ended.pop("R").set_result(None)
        return during, await asyncio.wait_for(asked, 5)

    during, answer = asyncio.run(main())
    assert during is False and answer == {}


class _Queued:
    """A device's record of work left running (``QueuedWork``): not done until waited."""

    def __init__(self):
        self.waited = threading.Event()

    def done(self):
        return self.waited.is_set()


class _Backend:
    def __init__(self):
        self.queued = _Queued()

    def synchronize(self):
        self.queued.waited.set()


class _Plugin:
    def __init__(self):
        self.store = type("Store", (), {"backend": _Backend()})()


@pytest.mark.parametrize("why", ["a task of another worker it follows failed", "its body cannot start"])
def test_a_task_that_does_not_run_waits_for_the_work_left_running_for_it(why):
    """A task behind a running one (which may leave its device work running for it) that
    then does not run waits for that work (``_settle_device``): a fault in it is found
    now, not by a later task."""
    async def main():
        loop = asyncio.get_running_loop()
        if why.startswith("a task"):
            worker = _TwoPeers({"tcp://a": {"failed": {"exception": "boom", "traceback": None}}})
            msg = _msg("T", ["R"], {"tcp://a": ["A"]})
        else:
            worker, msg = _Worker(), {**_msg("T", ["R"]), "task": b"not a pickle"}
        worker.logged = []
        plugin = _Plugin()
        tasks = DirectTasks(worker, plugin=plugin)
        tasks.ended["R"] = loop.create_future()
        tasks.running.add("R")
        answers = []
        tasks._start(msg, answers.append)
        await asyncio.sleep(0.01)
        ready = tasks.ready()  # R may leave its work running for T
        tasks.running.discard("R")
        tasks.ended.pop("R").set_result(None)
        waited = await loop.run_in_executor(None, plugin.store.backend.queued.waited.wait, 5)
        return ready, answers, waited

    ready, answers, waited = asyncio.run(main())
    assert ready is True and waited
    assert [a["key"] for a in answers] == ["T"] and "exception" in answers[0]


class _TwoPeers(_Worker):
    """A worker whose peers answer ``answers[address]`` when ``release`` is set (at once
    when it is None), recording who was asked."""

    def __init__(self, answers=None, release=None):
        self.answers, self.release, self.asked = answers or {}, release, []

    def rpc(self, address):
        peer = self

        class _Rpc:
            async def dgvm_direct_ended(self, **kwargs):
                peer.asked.append(address)
                if peer.release is not None:
                    await peer.release.wait()
                return peer.answers.get(address, {})

        return _Rpc()


def test_a_task_asks_every_other_worker_at_once_when_it_is_next():
    """A task that follows tasks of two other workers asks both together once it is next
    behind its own worker's tasks (before the last of them ended), not one after the
    other; a task further back in the chain asks nothing yet (a chain sent at once holds
    a question or two per worker, not one per step)."""
    async def main():
        loop = asyncio.get_running_loop()
        release = asyncio.Event()
        worker = _TwoPeers(release=release)
        worker.logged = []
        tasks = DirectTasks(worker, plugin=None)
        for key in ("Q", "R"):  # its own worker's tasks, still to end: Q first, then R
            tasks.ended[key] = loop.create_future()
        answers = []
        tasks._start(_msg("T", ["Q", "R"], {"tcp://a": ["A"], "tcp://b": ["B"]}), answers.append)
        await asyncio.sleep(0.05)
        early = list(worker.asked)  # behind Q and R: nothing asked
        tasks.ended.pop("Q").set_result(None)
        await asyncio.sleep(0.05)
        both = sorted(worker.asked)  # next behind R (still running): both asked
        release.set()
        tasks.ended.pop("R").set_result(None)
        deadline = loop.time() + 10
        while not answers and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return early, both, answers

    early, both, answers = asyncio.run(main())
    assert early == []
    assert both == ["tcp://a", "tcp://b"]
    assert answers == [{"key": "T", "result": None}]


def test_a_task_asks_nothing_while_the_task_it_follows_here_still_waits():
    """A chain sent at once: a step whose own worker's task before it still waits (for
    its own peers, say) asks nothing yet; it asks once that task runs."""
    async def main():
        loop = asyncio.get_running_loop()
        worker = _TwoPeers()
        worker.logged = []
        tasks = DirectTasks(worker, plugin=None)
        tasks.ended["R"] = loop.create_future()  # arrived here, still waiting for its turn
        tasks.passed["R"] = r_passed = loop.create_future()
        answers = []
        tasks._start(_msg("T", ["R"], {"tcp://a": ["A"]}), answers.append)
        await asyncio.sleep(0.05)
        early = list(worker.asked)
        tasks._passed("R", r_passed)  # R runs now
        await asyncio.sleep(0.05)
        then = list(worker.asked)
        tasks.ended.pop("R").set_result(None)
        deadline = loop.time() + 10
        while not answers and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return early, then, answers, tasks.passed

    early, then, answers, passed = asyncio.run(main())
    assert early == [] and then == ["tcp://a"]
    assert answers == [{"key": "T", "result": None}] and passed == {}


def test_a_task_waits_for_other_workers_peer_wait_from_when_its_own_tasks_ended(monkeypatch):
    """``PEER_WAIT`` counts from when the task's own worker's tasks it follows ended: a
    long predecessor here does not send it back, and a worker that never answers does
    (unready), giving its question's place back."""
    from dgvm.worker import direct

    monkeypatch.setattr(direct, "PEER_WAIT", 0.2)

    async def main():
        loop = asyncio.get_running_loop()
        answers = asyncio.Event()
        slow = _TwoPeers(release=answers)  # asked at once, answers after R ended here
        slow.logged = []
        tasks = DirectTasks(slow, plugin=None)
        tasks.ended["R"] = loop.create_future()  # runs here for longer than PEER_WAIT
        first = []
        tasks._start(_msg("T", ["R"], {"tcp://a": ["A"]}), first.append)
        await asyncio.sleep(0.4)
        tasks.ended.pop("R").set_result(None)
        await asyncio.sleep(0.1)
        answers.set()
        deadline = loop.time() + 10
        while not first and loop.time() < deadline:
            await asyncio.sleep(0.01)
        silent = _TwoPeers(release=asyncio.Event())  # never answers
        silent.logged = []
        tasks2 = DirectTasks(silent, plugin=None)
        second = []
        tasks2._start(_msg("U", [], {"tcp://b": ["B"]}), second.append)
        while not second and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        return first, second, tasks2._peer_questions._value

    first, second, free = asyncio.run(main())
    assert first == [{"key": "T", "result": None}]
    assert second == [{"key": "U", "unready": True}]
    assert free == direct.PEER_QUESTIONS


_GATE = threading.Event()


def _held(indices, results):
    _GATE.wait(10)
    return None


class _Comm:
    """A client's connection, fed by the test; what the worker writes is kept."""

    allow_offload = True

    def __init__(self):
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.written: list = []
        self.aborted = False

    async def read(self):
        batch = await self.inbox.get()
        if batch is None:
            raise OSError("aborted")
        return batch

    async def write(self, batch):
        if self.aborted:
            raise OSError("aborted")
        self.written.append(batch)

    def abort(self):
        if not self.aborted:
            self.aborted = True
            self.inbox.put_nowait(None)


def test_a_worker_closing_answers_what_ran_before_it_closes_the_connection_and_runs_nothing_new():
    """A task that reaches a worker as it closes does not run, and the worker closes the
    client's connection (its client then strands what it did not hear of), but only once
    a task of that connection already running has answered."""
    from concurrent.futures import ThreadPoolExecutor

    from distributed.core import Status

    async def main():
        worker = _Worker()
        worker.logged, worker.status = [], Status.running
        worker.executor = ThreadPoolExecutor(2)
        tasks = DirectTasks(worker, plugin=None)
        comm = _Comm()
        serving = asyncio.ensure_future(tasks.serve(comm))
        _GATE.clear()
        comm.inbox.put_nowait([{**_msg("T1", []), "task": pickle.dumps((_held, ()))}])
        await asyncio.sleep(0.1)  # (T1 runs)
        worker.status = Status.closing
        comm.inbox.put_nowait([_msg("T2", []), _msg("T3", ["T2"])])  # T3 behind T2, on this connection
        await asyncio.sleep(0.2)
        still_open = not comm.aborted
        _GATE.set()
        await asyncio.wait_for(serving, 10)
        worker.executor.shutdown()
        return still_open, comm

    still_open, comm = asyncio.run(main())
    assert still_open, "the connection closed before the task that ran there answered"
    assert comm.aborted
    assert [m["key"] for batch in comm.written for m in batch] == ["T1"]
