"""A worker that leaves: nothing waits on it for ever.

Every dgvm task is pinned to one worker (``workers=[w]``, no stealing). When that worker
is gone, Dask keeps the task in its ``no-worker`` state: its future would never answer,
nor would any call that waits for it (a read, a reduction, a launch in flight, a free),
nor any task after it. Tasks that had finished there go the same way if their results
were held there (Dask computes them again, on the worker that left). So a dgvm task that
lands in ``no-worker`` with every worker it was pinned to gone fails with ``ChunkLost``,
naming that worker and the chunks it held; the tasks that follow it fail with it
(``note``: O(1) per transition; ``fail_stranded``: on the loop's next turn, O(tasks)).

Everyone else hears of the departure at once: the clients through ``messages.LEFT_TOPIC``
(a call in flight to the worker stops waiting, and the next use of a lost chunk says so
at once, not after Dask's connect timeout), the workers through ``messages.PEER_LEFT``.

A ``cpu`` worker keeps its chunks in a shared-memory arena that its process unlinks when
it closes; a process killed never does. The arena's name comes with the worker's
heartbeats (``arena``), and the scheduler unlinks it when it exists on this host, off
the event loop (``left``). The scheduler's own requests to the worker stop waiting then (``peers``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

import numpy as np

from dgvm import dask_compat
from dgvm.backends.cpu import unlink_arena
from dgvm.protocol import arguments, messages
from dgvm.protocol.errors import ChunkLost, KernelError
from dgvm.protocol.records import WorkerAddress, WorkerUid
from dgvm.streams import tell
from dgvm.transfer import LeftPeers

logger = logging.getLogger("dgvm.scheduler")

REMEMBERED = 256  # departed workers whose lost chunks a late task may still need named
STRANDED_WAIT = 60.0  # seconds a client's stranded tasks wait for their worker's removal
NAMED = 4  # allocations a ChunkLost message names chunks of


class Departures:
    """The workers that left and the tasks stranded on them (a part of the GVAT plugin)."""

    def __init__(self, gvat):
        self.gvat = gvat
        self.scheduler = None  # set when the plugin starts
        self._stranded: set = set()
        self._done: set = set()  # dgvm tasks whose result was dropped from memory since
        # address -> uid of the worker that left there; its lost chunks once asked
        self._uids: "collections.OrderedDict[str, WorkerUid]" = collections.OrderedDict()
        self._lost: dict[str, dict] = {}
        self.arenas: dict[str, str] = {}  # address -> the shared-memory arena a worker reported
        self.peers = LeftPeers()  # the scheduler's requests to workers, which stop when one leaves
        self.durability = None  # the plugin's (copies that take over a lost home's chunks)
        # key -> the error of a task that ended its worker's device context (it fails with
        # it, wherever its worker's failure report went; never run again elsewhere)
        self._ended: "collections.OrderedDict[str, str]" = collections.OrderedDict()

    def context_lost(self, worker: WorkerAddress, key: str, error: str) -> None:
        """RPC handler (``messages.CONTEXT_LOST``): task ``key`` ended the device context
        of ``worker``, which exits now (``dgvm.worker.context_loss``). O(1)."""
        worker, key, error = arguments.text("worker", worker), arguments.text("key", key), arguments.text("error", error)
        logger.warning("dgvm: task %s ended the device context of worker %s", key, worker)
        self._ended[key] = error
        while len(self._ended) > REMEMBERED:
            self._ended.popitem(last=False)

    def note(self, key, start: str, finish: str) -> None:
        """Dask's transition hook (every transition): note a dgvm task that went to
        ``no-worker`` (or lost its result), to fail on the loop's next turn if its worker is
        gone, and whether it had finished; tell the clients of a finished one that fails.
        O(1)."""
        if self.scheduler is None or not isinstance(key, str) or not key.startswith(messages.TASK_PREFIX):
            return
        if self._ended and finish in ("erred", "forgotten"):
            self._ended.pop(key, None)  # its own failure report came: nothing to do for it
        if start == "memory":
            self._done.add(key)
        elif finish == "forgotten":
            self._done.discard(key)
        elif finish == "erred" and key in self._done:
            # It had finished, its result went with a worker, and it failed since (Dask
            # computes a finished task again where its result was held; here, or a task it
            # followed, it fails). What it did to chunks is done, lost with them where they
            # were there: its clients hear so before its failure (the same stream), and
            # their waits and later tasks pass it over (``client.failures``).
            self._done.discard(key)
            self.scheduler.log_event(messages.LEFT_TOPIC, {"ran": [key]})
        # (A result lost goes memory -> released -> waiting -> no-worker, or stays released.)
        if finish != "no-worker" and not (start == "memory" and finish == "released"):
            return
        if not self._stranded:
            self.scheduler.loop.add_callback(self.fail_stranded)
        self._stranded.add(key)

    def fail_stranded(self) -> None:
        """Fail with ``ChunkLost`` the noted tasks whose every worker left (a worker that
        is only paused still runs its tasks later). One that had not finished and may run
        again (``messages.RERUN_ANNOTATION``) runs again instead where copies of its
        chunks took over, when every allocation it names lost nothing (``rerun``)."""
        keys, self._stranded = self._stranded, set()
        stimulus = f"dgvm-worker-left-{time.time()}"
        again, later = [], []
        for key in keys:
            pinned = dask_compat.stranded_on(self.scheduler, key)
            if pinned is None:
                continue
            ended = self._ended.pop(key, None)
            if ended is not None:
                self._fail(key, pinned, stimulus, KernelError(ended))
                continue
            mode = dask_compat.annotation(self.scheduler, key, messages.RERUN_ANNOTATION, "")
            copied = self.durability is not None and self.durability.has_copies(
                dask_compat.annotation(self.scheduler, key, messages.ALLOCATIONS_ANNOTATION, []))
            # (A task that read and had finished is not run again: later writers may have
            # changed what it read since.)
            if copied and (mode == "writes" or (mode == "reads" and key not in self._done)):
                again.append((key, pinned))
            elif copied:
                later.append((key, pinned))  # its error names what copies did not keep
            else:
                self._fail(key, pinned, stimulus)
        if again:
            self.durability.plugin.spawn(self.rerun(again))
        if later:
            self.durability.plugin.spawn(self._fail_settled(later))

    async def _settled(self, stranded) -> None:
        """Wait (bounded) until copies took over the chunks of the workers that ``stranded``
        ((key, pinned addresses) each) were pinned to."""
        for address in {a for _, pinned in stranded for a in pinned}:
            uid = self._uids.get(address)
            if uid is not None:
                await self.durability.settled_worker(uid)  # (bounded)

    async def _fail_settled(self, stranded) -> None:
        """``_fail`` each task of ``stranded`` once copies took over what they could."""
        await self._settled(stranded)
        stimulus = f"dgvm-worker-left-{time.time()}"
        for key, pinned in stranded:
            if dask_compat.stranded_on(self.scheduler, key) is not None:
                self._fail(key, pinned, stimulus)

    def _fail(self, key, pinned, stimulus: str, error: Exception | None = None) -> None:
        try:
            error = error or ChunkLost(self._why(key, sorted(pinned)[0]))
            dask_compat.fail_waiting_task(self.scheduler, key, error, stimulus)
        except Exception:  # noqa: BLE001  (the task changed meanwhile; never stop the others)
            logger.exception("dgvm: failing task %s stranded on %s", key, sorted(pinned))

    def _why(self, key, address: WorkerAddress) -> str:
        """Task ``key``'s ``ChunkLost`` message: the chunks of the allocations it names that
        the worker at ``address`` took with it, and, where copies kept them all, why it
        fails all the same."""
        named = dask_compat.annotation(self.scheduler, key, messages.ALLOCATIONS_ANNOTATION, [])
        return self._lost_text(key, address, named, key in self._done)

    def _lost_text(self, key, address: WorkerAddress, named, done: bool) -> str:
        text = f"dgvm task {key} {'ran' if done else 'was to run'} on {self.describe(address, named)}"
        if named and not self._still_lost(address, named):
            text += ("; its result was lost with it" if done else
                     "; a task that may do anything (map_chunks) is not run again elsewhere")
        return text

    async def stranded(self, worker: WorkerAddress, tasks: list, sent: bool = True) -> dict:
        """RPC handler (``messages.STRANDED``): a client's connection to ``worker`` broke
        with ``tasks`` ({key, allocations, rerun} each, ``messages.RERUN_ANNOTATION``'s
        modes) unanswered there (``dgvm.client.direct``). Once the scheduler removed that
        worker (at most ``STRANDED_WAIT``) and copies took over its chunks, each runs again
        where they did (``{"rerun": address, "written": chunks its first run wrote for
        good}``), or fails (``{"lost": ChunkLost's text}``, ``{"failed": the KernelError of
        a task that ended its worker's device context}``). A worker still there then:
        ``{"broke": text}``. Tasks never sent (``sent=False``: their client heard the
        worker left) go to a worker that registered at that address since: ``{"retry": 1}``."""
        worker = arguments.text("worker", worker)
        tasks = [self._stranded_task(k, t) for k, t in enumerate(arguments.sequence("tasks", tasks))]
        if not arguments.flag("sent", sent) and worker in self.scheduler.workers:
            return {t["key"]: {"retry": 1} for t in tasks}
        deadline = time.monotonic() + STRANDED_WAIT
        while self._still_there(worker) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._still_there(worker):
            text = (f"the connection to worker {worker} broke while it ran the task, and the "
                    f"worker is still in the cluster {STRANDED_WAIT:g} s later")
            return {t["key"]: {"broke": f"dgvm task {t['key']}: {text}"} for t in tasks}
        uid = self._uids.get(worker)
        if uid is not None and self.durability is not None:
            await self.durability.settled_worker(uid)
        answers = {}
        for t in tasks:
            key, named, mode = t["key"], t["allocations"], t["rerun"]
            ended = self._ended.pop(key, None)
            if ended is not None:
                answers[key] = {"failed": ended}
                continue
            if mode and self.durability is not None and self.durability.has_copies(named):
                target = self.durability.rerun_target([uid], named) if uid is not None else None
                if target is not None:
                    answers[key] = {"rerun": target, "written": self.durability.written_by(key, named)}
                    continue
            answers[key] = {"lost": self._lost_text(key, worker, named, False)}
        return answers

    async def rerun(self, stranded: list) -> None:
        """Once copies took over the chunks of the workers the tasks ``stranded`` ((key,
        pinned addresses) each) were pinned to, run each again on the worker that holds
        most of its chunks from there, or fail it with ``ChunkLost`` if an allocation it
        names lost chunks."""
        await self._settled(stranded)
        stimulus = f"dgvm-rerun-{time.time()}"
        for key, pinned in stranded:
            if dask_compat.stranded_on(self.scheduler, key) is None:
                continue  # (it changed meanwhile: released, or failed with a task it followed)
            named = dask_compat.annotation(self.scheduler, key, messages.ALLOCATIONS_ANNOTATION, [])
            target = self.durability.rerun_target([self._uids.get(a) for a in pinned], named)
            try:
                if target is not None:  # (before the task, on the same stream)
                    done = messages.ALL_WRITTEN if key in self._done else self.durability.written_by(key, named)
                    if done:
                        tell(self.scheduler.stream_comms.get(target), messages.written({key: done}))
                if target is not None and dask_compat.repin_stranded_task(self.scheduler, key, target, stimulus):
                    logger.info("dgvm: task %s runs again on %s (its worker left)", key, target)
                    continue
            except Exception:  # noqa: BLE001
                logger.exception("dgvm: running task %s again on %s", key, target)
            self._fail(key, pinned, stimulus)

    @staticmethod
    def _stranded_task(k: int, task) -> dict:
        task = arguments.mapping(f"tasks[{k}]", task)
        return {"key": arguments.text(f"tasks[{k}]['key']", task.get("key")),
                "allocations": arguments.integers(f"tasks[{k}]['allocations']", task.get("allocations", [])),
                "rerun": "" if task.get("rerun", "") == "" else
                arguments.text(f"tasks[{k}]['rerun']", task.get("rerun"), ("writes", "reads"))}

    def _still_there(self, address: WorkerAddress) -> bool:
        """Is a worker at ``address``? (Which one is not known: a worker that registered
        there since may run the stranded tasks still, so they are not run again elsewhere
        while one is there.)"""
        return address in self.scheduler.workers

    def left(self, address: WorkerAddress, uid: WorkerUid | None) -> None:
        """The scheduler removed the worker at ``address`` (the plugin's remove_worker
        hook): tell the clients, unlink its arena. O(1)."""
        if uid is not None:
            self._uids[address] = uid
            self._lost.pop(address, None)
            while len(self._uids) > REMEMBERED:
                gone, _ = self._uids.popitem(last=False)
                self._lost.pop(gone, None)
        self.scheduler.log_event(messages.LEFT_TOPIC, {"worker": address})
        self.peers.left(address)
        arena = self.arenas.pop(address, None)
        if arena is not None:
            # Off the loop: unlinking gives its pages back, milliseconds per GiB.
            try:
                asyncio.get_running_loop().run_in_executor(None, unlink_arena, arena)
            except RuntimeError:  # the process is exiting and starts no threads: here, then
                unlink_arena(arena)

    def describe(self, address: WorkerAddress, allocations=()) -> str:
        """``worker W, which left the cluster holding chunks ... of allocation ...``: of
        ``allocations`` (those a task names; any, if it names none) where it held some."""
        lost = self._still_lost(address, allocations)
        named = [a for a in allocations if a in lost] if allocations else list(lost)
        if not named:
            of = f"allocations {sorted(allocations)}" if allocations else "a live allocation"
            what = f"holding no chunk of {of}"
        else:
            held = [f"chunks {lost[a]} of allocation {a}" for a in named[:NAMED]]
            more = f" and of {len(named) - NAMED} more allocations" if len(named) > NAMED else ""
            what = f"holding {', '.join(held)}{more}; their data is lost"
        return f"worker {address}, which left the cluster {what}"

    def _still_lost(self, address: WorkerAddress, allocations=()) -> dict:
        """``_lost_chunks(address)`` without the chunks a copy took over since (promoted
        backups): of ``allocations`` only, when given (O(their chunks))."""
        lost, uid = self._lost_chunks(address), self._uids.get(address)
        out = {}
        for a in (allocations or lost):
            alloc, idx = self.gvat.allocations.get(int(a)), lost.get(a)
            if idx is None:
                continue
            if alloc is not None and uid is not None:
                idx = [i for i in idx if int(alloc.homes[i]) == uid]
            if idx:
                out[a] = idx
        return out

    def _lost_chunks(self, address: WorkerAddress) -> dict:
        """Allocation id -> the chunks homed on the worker that left ``address`` (O(chunks
        of every allocation): once per worker, off the hooks)."""
        lost = self._lost.get(address)
        if lost is None:
            lost = {}
            uid = self._uids.get(address)
            if uid is not None:
                for alloc in self.gvat.allocations.values():
                    idx = np.flatnonzero(alloc.homes == uid)
                    if len(idx):
                        lost[alloc.alloc_id] = idx.tolist()
                self._lost[address] = lost
        return lost
