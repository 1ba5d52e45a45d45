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
    work running (``DirectTasks.ready``) only when it will run as soon as that one ends:
    not one that must still ask another worker, one behind a task not running yet, or one
    that follows a task that failed (it will not run)."""
    def msg(key, after, peers=None):
        return {"key": key, "after": after, "peers": peers or {}, "task": pickle.dumps((_noop, ())),
                "indices": [], "results": None, "written": None}

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
        for m in (msg("G", ["X"]), msg("P", ["R"], {"tcp://gone": ["A"]}), msg("H", ["Q", "R"])):
            tasks._start(m, answers.append)
            await asyncio.sleep(0.01)
            seen.append(tasks.ready())
        tasks._start(msg("F", ["R"]), answers.append)
        await asyncio.sleep(0.01)
        seen.append(tasks.ready())
        tasks.running.discard("R")
        seen.append(tasks.ready())  # R no longer runs: F waits behind nothing running
        for key in ("R", "X"):
            tasks.ended.pop(key).set_result(None)
        deadline = loop.time() + 10
        while len(answers) < 4 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return seen, answers, tasks.behind

    seen, answers, behind = asyncio.run(main())
    assert seen == [False, False, False, True, False]
    assert {a["key"] for a in answers} == {"G", "P", "H", "F"} and behind == {}
    assert {a["key"] for a in answers if a.get("unready")} == {"P"}
