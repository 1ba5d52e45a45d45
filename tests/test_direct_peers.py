"""The worker's side of ordering across workers on the direct plane (``DirectTasks``),
without a cluster: a task whose peer cannot say when the tasks it follows ended goes back
to its client unready, and a worker asked about a task that went back unready never
calls it ended (its followers there would run before it)."""

from __future__ import annotations

import asyncio

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


def test_a_task_another_worker_waits_for_is_ready_to_leave_its_work_running():
    """While another worker's task asks whether a task running here ended, that task may
    leave its device work running (``ready``): the asker runs next, and what it reads of
    this worker's chunks waits for that work there."""
    async def main():
        loop = asyncio.get_running_loop()
        tasks = DirectTasks(_Worker(), plugin=None)
        tasks.ended["R"] = loop.create_future()
        tasks.running.add("R")
        before = tasks.ready()
        asked = asyncio.ensure_future(tasks.ended_here(["R"]))
        await asyncio.sleep(0.01)
        during = tasks.ready()
        tasks.running.discard("R")
        tasks.finished["R"] = None
        tasks.ended.pop("R").set_result(None)
        answer = await asyncio.wait_for(asked, 5)
        return before, during, answer, tasks.ready(), tasks.behind

    before, during, answer, after, behind = asyncio.run(main())
    assert (before, during, after) == (False, True, False)
    assert answer == {} and behind == {}


def test_a_task_asks_every_other_worker_at_once():
    """A task that follows tasks of two other workers asks both as it arrives, before the
    task of its own worker it follows has ended: the answers do not come one after the
    other."""
    asked = []
    release = None

    class _SlowRpc:
        def __init__(self, address):
            self.address = address

        async def dgvm_direct_ended(self, **kwargs):
            asked.append(self.address)
            await release.wait()
            return {}

    class _TwoPeers(_Worker):
        def rpc(self, address):
            return _SlowRpc(address)

    async def main():
        nonlocal release
        release = asyncio.Event()
        loop = asyncio.get_running_loop()
        worker = _TwoPeers()
        worker.logged = []
        tasks = DirectTasks(worker, plugin=None)
        tasks.ended["R"] = loop.create_future()  # its own worker's task, still running
        answers = []
        tasks._start(_msg("T", ["R"], {"tcp://a": ["A"], "tcp://b": ["B"]}), answers.append)
        await asyncio.sleep(0.05)
        both = sorted(asked)
        release.set()
        tasks.ended.pop("R").set_result(None)
        deadline = loop.time() + 10
        while not answers and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return both, answers

    both, answers = asyncio.run(main())
    assert both == ["tcp://a", "tcp://b"]
    assert answers == [{"key": "T", "result": None}]
