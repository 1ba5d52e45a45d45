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
