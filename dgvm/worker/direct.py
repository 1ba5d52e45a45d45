"""The worker's end of the direct plane: operations sent straight from a client.

A client keeps one connection to each worker (``dgvm.client.direct``) and sends on it the
worker's task of each operation: the task body (``dgvm.worker.tasks`` and the engine's
task functions), its chunk indices, the keys of the earlier tasks *of this worker* it
must follow, and those of other workers (``peers``), whose workers it asks when they ended
(``ended_here`` there); one it cannot learn that of goes back to the client ``unready``.
The worker runs each on its thread pool once those it follows ended, in the order they
came where they depend on each other, and answers on the same connection: the result, or
the error with the worker's traceback.

Before it answers, the GVAT has the task's report of the chunks it wrote that other
workers may hold copies of (a request, awaited: ``_reports``), as on Dask's task path,
where every report precedes the task's completion on the worker's stream: no later task,
on any worker, can read a replica the write made stale, and backups hold the write. So does the report of a task that read chunks of other workers (they may move here, and
the caller sees its misses counted once the operation is done). The report of a write to
chunks of which no copy exists goes on the worker's stream, off the operation's path: a copy made later is made of the new values, and the GVAT learns the
new version before it counts that copy or soon after (then it drops it).

A task that follows a failed one fails with its error without running (Dask's rule for a
task whose dependency failed, ``dgvm.client.failures``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

from distributed.core import Status, error_message
from distributed.protocol import pickle

from dgvm import config, streams
from dgvm.protocol import messages, task_results
from dgvm.protocol.errors import DgvmError, comm_error

logger = logging.getLogger("dgvm.worker")

# Failed, finished and unready tasks remembered, for the tasks that follow them here or
# on other workers (the oldest forgotten first).
REMEMBERED = 4096
ARRIVAL_WAIT = 10.0  # seconds a task another worker's task follows may take to arrive here
# Seconds a task waits for those of other workers it follows once this worker's tasks it
# follows ended (then: unready).
PEER_WAIT = 120.0
PEER_QUESTIONS = 64  # questions to other workers waiting at once
CLOSE_DRAIN = 5.0  # seconds a closing worker's connection waits for its tasks' answers

_running = threading.local()  # the direct task this thread runs: worker, key, reports, fresh


def _remember(table: "collections.OrderedDict", key: str, value) -> None:
    table[key] = value
    while len(table) > REMEMBERED:
        table.popitem(last=False)


def closing(worker) -> bool:
    """Is ``worker`` closing (its dgvm store torn down by ``teardown``, or about to be)?"""
    return getattr(worker, "status", None) in (Status.closing, Status.closed)


class _WorkerClosing(Exception):
    """A task reached a thread as its worker began closing: it does not run."""


def running():
    """(worker, key, reports, fresh) of the direct task this thread runs, or None (``fresh``:
    which pushed pieces it may take, ``dgvm.worker.pushes``)."""
    return getattr(_running, "task", None)


class DirectTasks:
    """The direct plane's tasks on one worker (a part of the chunk-store plugin)."""

    def __init__(self, worker, plugin):
        self.worker = worker
        self.plugin = plugin  # the chunk store's: what a rerun wrote before, context checks
        self.ended: dict[str, asyncio.Future] = {}  # key -> done when the task ends
        # key -> done when the task's waits are over: its body goes to a thread, or it
        # will not run
        self.passed: dict[str, asyncio.Future] = {}
        self.failed: "collections.OrderedDict[str, dict]" = collections.OrderedDict()
        self.finished: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        # key -> [done when it arrives here, how many ask]
        self.arrivals: dict[str, list] = {}
        # Questions to other workers at once (each holds a pooled connection while it
        # waits): past them, a task goes back to its client unready at once.
        self._peer_questions = asyncio.Semaphore(PEER_QUESTIONS)
        # Tasks sent back unrun (those of other workers they follow could not be waited
        # for here): the client orders them itself, and the tasks here that follow them too.
        self.unready: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self.peer_asks = 0  # questions from other workers' tasks answered here (``ended_here``)
        # key -> [(alloc id, chunks)] it wrote here, of finished tasks (``ended_here``)
        self.wrote: "collections.OrderedDict[str, list]" = collections.OrderedDict()
        # key -> {worker: chunks}: workers that get the pieces they read of those chunks
        # once it ends (``push`` messages that came while it had not ended:
        # ``dgvm.worker.pushes``)
        self.push_to: dict[str, dict] = {}
        self.waiting = 0  # tasks ready to run, waiting for a thread
        # key -> how many tasks run right after it ends (``ready``)
        self.behind: dict[str, int] = {}
        self.running: set[str] = set()  # tasks whose body runs in a thread now
        self._waiting_lock = threading.Lock()  # (counted up on the loop, down in a thread)

    async def serve(self, comm, client: str | None = None):
        """RPC handler (``messages.DIRECT``): the client's connection, read until it closes.
        Each message is a list of tasks; answers go back in batches on the same comm."""
        comm.allow_offload = False  # (``Channel._connect``)
        answers: list = []
        flushing = asyncio.Event()
        done = False
        # Tasks started from this connection and not answered, those of them that will not
        # be (``_unready``), and answers being written.
        started: set = set()
        stranded: set = set()
        writing = [0]
        closer: list = []

        async def flush():
            while not done or answers:
                await flushing.wait()
                flushing.clear()
                while answers:
                    batch = answers[:]
                    answers.clear()
                    writing[0] += 1
                    try:
                        await comm.write(batch)
                    except Exception:  # noqa: BLE001  (the client went: its tasks' answers with it)
                        answers.clear()
                        return
                    finally:
                        writing[0] -= 1

        def answer(msg):
            started.discard(msg.get("key"))
            answers.append(msg)
            flushing.set()

        async def drain_then_close():
            # The tasks of this connection that run or ended here are answered first (a
            # bounded wait); then the client strands the rest.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CLOSE_DRAIN
            while (started - stranded or answers or writing[0]) and loop.time() < deadline:
                await asyncio.sleep(0.005)
            comm.abort()

        def close(key):  # (a task that reached this worker as it closes: ``_unready``)
            stranded.add(key)
            if not closer:
                closer.append(asyncio.ensure_future(drain_then_close()))

        answer.close = close

        sender = asyncio.ensure_future(flush())
        try:
            while True:
                try:
                    batch = await comm.read()
                except Exception:  # noqa: BLE001  (closed: the client left or closed)
                    break
                try:
                    for msg in batch:
                        if "push" in msg:  # (not a task: a reader waits for a task sent before)
                            try:
                                self._push_request(msg["push"], msg["to"], msg["chunks"])
                            except Exception:  # noqa: BLE001  (its reader asks instead)
                                logger.exception("dgvm: a push message %s", msg)
                        else:
                            started.add(msg.get("key"))
                            self._start(msg, answer)
                except Exception:  # noqa: BLE001  (the connection closes below: its tasks are stranded)
                    logger.exception("dgvm: a message of client %s could not be started", client)
                    break
        finally:
            done = True
            flushing.set()
            await asyncio.wait([sender], timeout=5)
            # Closed here too, whatever ended the reading (a message that could not be read or
            # started): a connection left open would leave its client waiting for answers
            # that never come; closed, its tasks are stranded (``DirectPlane.stranded``).
            comm.abort()
        return Status.dont_reply

    def _start(self, msg: dict, answer) -> None:
        key = msg["key"]
        loop = asyncio.get_running_loop()
        ended, passed = loop.create_future(), loop.create_future()
        self.ended[key], self.passed[key] = ended, passed
        self.unready.pop(key, None)  # (sent again, ordered by its client this time)
        entry = self.arrivals.pop(key, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(None)
        asyncio.ensure_future(self._run(key, msg, answer, ended, passed))

    async def _run(self, key: str, msg: dict, answer, ended: asyncio.Future, passed: asyncio.Future) -> None:
        start, status, chunks = time.time(), "error", 0
        asks: list = []
        started = [False]  # its body began in a thread
        try:
            peers = msg.get("peers") or {}

            def ask():
                # The questions to other workers go out together, once this task is next
                # behind its own worker's tasks: the task it follows last here runs (a
                # chain sent at once holds a question or two per worker at a time).
                if peers and not asks:
                    fresh = msg.get("fresh") or {}  # (their rows it reads: with the answers)
                    asks.extend(asyncio.ensure_future(self._peer_ended(
                        peer, keys, {k: fresh[k][2] for k in keys if k in fresh})) for peer, keys in peers.items())

            after = list(dict.fromkeys(msg.get("after", ())))  # (a task read and written: listed twice)
            # Behind the last of them still to end, it runs as soon as that one ends and
            # the other workers answer (nothing it follows failed or went back), so it
            # counts as ready while that one runs (``ready``). If it then does not run,
            # it waits for the device work left running for it (``finally``).
            pending = [i for i, dep in enumerate(after) if dep in self.ended]
            last = pending[-1] if pending and not any(
                dep in self.failed or dep in self.unready for dep in after) else None
            for i, dep in enumerate(after):
                f = self.ended.get(dep)
                if f is not None:
                    counted = i == last
                    if counted:
                        self._behind(dep, +1)
                    try:
                        if counted:
                            before = self.passed.get(dep)
                            if before is not None:  # (it runs, or will not: its waits are over)
                                await asyncio.shield(before)
                            ask()
                        await asyncio.shield(f)
                    finally:
                        if counted:
                            self._behind(dep, -1)
                failed = self.failed.get(dep)
                if failed is not None:  # it fails with the error of the task it follows
                    self._failed(key, failed)
                    answer({"key": key, **failed})
                    return
                if dep in self.unready:
                    status = self._unready(key, answer)
                    return
            ask()
            # (A failure told at once, whoever says it; ``PEER_WAIT`` counts from here, once
            # this worker's tasks it follows ended.)
            for asked in asyncio.as_completed(asks, timeout=PEER_WAIT):
                try:
                    ended_there = await asked
                except asyncio.TimeoutError:
                    ended_there = {"unready": f"other workers did not answer within {PEER_WAIT:g} s"}
                if "failed" in ended_there:  # it fails with the error of the task it follows
                    self._failed(key, ended_there["failed"])
                    answer({"key": key, **ended_there["failed"]})
                    return
                pushed = ended_there.pop("pushed", None)
                if pushed and getattr(self.plugin, "pushes", None) is not None:
                    try:  # (rows of what they wrote, sent with the answer)
                        self.plugin.pushes.pushed(pushed)
                    except Exception:  # noqa: BLE001  (it asks for them instead)
                        logger.exception("dgvm: rows pushed with an answer to task %s", key)
                if ended_there:  # not known there (any more): its client orders it instead
                    status = self._unready(key, answer)
                    return
            if self._closing():
                status = self._unready(key, answer)
                return
            if msg.get("written") is not None:  # run again: what its first run wrote for good
                self.plugin.written({key: msg["written"]})
            fn, args = pickle.loads(msg["task"])
            indices, results = msg["indices"], msg.get("results")
            # Tasks of other workers it follows that were the last to write some chunks: their pushed
            # pieces are what it reads (``dgvm.worker.pushes``).
            fresh = {k: (w, a, frozenset(idx)) for k, (w, a, idx) in (msg.get("fresh") or {}).items()}
            loop = asyncio.get_running_loop()
            self._passed(key, passed)
            with self._waiting_lock:
                self.waiting += 1
            try:
                result, reports = await loop.run_in_executor(
                    self.worker.executor, self._call, key, fn, args, indices, results, started, fresh)
            except Exception as e:  # noqa: BLE001  (the task's own error: the caller's)
                if not started[0]:  # (the pool refused it: the worker is closing)
                    with self._waiting_lock:
                        self.waiting -= 1
                if isinstance(e, _WorkerClosing):  # (it reached a thread as the worker began closing)
                    status = self._unready(key, answer)
                    return
                failed = error_message(e)
                failed.pop("status", None)
                reports = getattr(e, "_dgvm_reports", ())
                await self._reports(reports)
                self._failed(key, failed)
                self.plugin.context.task_failed(key)
                answer({"key": key, **failed})
                return
            await self._reports(reports)
            status, chunks = "finished", len(indices)
            answer({"key": key, **result})
            pushes = getattr(self.plugin, "pushes", None)
            if pushes is not None:
                # Workers whose next tasks read pieces of what it wrote get them now: after
                # its answer to its client (written first, on the loop's next turn).
                try:
                    wrote = [(m["alloc_id"], m["wrote"]) for m, _, _ in reports if m.get("wrote")]
                    if wrote:
                        _remember(self.wrote, key, wrote)
                    readers = {w: set(c) for w, c in (msg.get("push_to") or {}).items()}
                    for w, c in self.push_to.get(key, {}).items():
                        readers.setdefault(w, set()).update(c)
                    pushes.after_task(key, wrote, readers)
                except Exception:  # noqa: BLE001  (answered already: its readers ask instead)
                    logger.exception("dgvm: pushing the pieces task %s wrote", key)
        except Exception as e:  # noqa: BLE001  (never leave a task unanswered)
            logger.exception("dgvm: direct task %s", key)
            failed = error_message(e)
            failed.pop("status", None)
            self._failed(key, failed)
            answer({"key": key, **failed})
        finally:
            for asked in asks:
                asked.cancel()  # (a task that did not get that far)
            self.push_to.pop(key, None)
            self._passed(key, passed)
            if self.ended.get(key) is ended:  # (not a later run of the same key's)
                del self.ended[key]
            if status == "finished":
                _remember(self.finished, key, None)
            ended.set_result(None)
            # For the dashboard (one small message on the worker's stream; the scheduler
            # keeps the last ``distributed.admin.low-level-log-length`` of them). A task
            # sent back unready did not run here: it is told when it runs.
            if status != "unready":
                self.worker.log_event(messages.OPERATIONS_TOPIC, {
                    "key": key, "worker": self.worker.address, "start": start, "stop": time.time(),
                    "status": status, "chunks": chunks})
            if not started[0]:
                # It did not run (a task it follows failed or went back, or it could not
                # start): the task before it may have left its device work running for it.
                self._settle_device()

    def _closing(self) -> bool:
        return closing(self.worker)

    def _push_request(self, key: str, reader: str, chunks: list) -> None:
        """(A ``push`` message of a client.) A task of worker ``reader`` follows task
        ``key``, sent here before, as the last writer of ``chunks``: once it ends, send
        ``reader`` the pieces it read of those (``dgvm.worker.pushes``); at once if it
        ended."""
        if key in self.ended:  # (``_run`` takes them when it ends)
            self.push_to.setdefault(key, {}).setdefault(reader, set()).update(chunks)
            return
        pushes = getattr(self.plugin, "pushes", None)
        if key in self.finished and key in self.wrote and pushes is not None:
            pushes.after_task(key, self.wrote[key], {reader: set(chunks)})

    async def _peer_ended(self, peer: str, keys: list, rows: dict) -> dict:
        """Wait for tasks ``keys`` of the worker at ``peer`` to end (``ended_here``
        there): {} once they all finished, {"failed": error} of one that failed, or
        {"unready": ...} if that worker cannot say (it left or never got them; the
        asker bounds the wait, ``PEER_WAIT``)."""
        if self._peer_questions.locked():
            return {"unready": "too many questions to other workers waiting"}
        async with self._peer_questions:
            try:
                return await messages.call(self.worker.rpc(peer), messages.DIRECT_ENDED, keys=keys,
                                           reader=self.worker.address, rows=rows, required=True)
            except Exception as e:  # noqa: BLE001  (the client orders the task instead)
                return {"unready": repr(e)}

    async def ended_here(self, keys: list, reader: str | None = None, rows: dict | None = None) -> dict:
        """RPC handler (``messages.DIRECT_ENDED``): wait until the direct tasks ``keys``
        end here; {"failed": error} of the first that failed, {} when all finished, or
        {"unknown": keys} for those that neither ran here lately nor arrived within
        ``ARRIVAL_WAIT`` (the client sent them before the task that asks, on another
        connection: they may come after its question). When they all finished, the
        pieces worker ``reader`` read before of the chunks ``rows`` names (key -> chunk
        indices its task reads as that task left them) come with the answer
        (``"pushed"``: ``dgvm.worker.pushes``)."""
        loop = asyncio.get_running_loop()
        self.peer_asks += 1
        unknown = []
        for key in keys:
            if key not in self.ended and key not in self.failed and key not in self.finished:
                entry = self.arrivals.get(key)
                if entry is None:
                    entry = self.arrivals[key] = [loop.create_future(), 0]
                entry[1] += 1  # (askers: the last to give up forgets it)
                try:
                    await asyncio.wait_for(asyncio.shield(entry[0]), ARRIVAL_WAIT)
                except asyncio.TimeoutError:
                    unknown.append(key)
                    continue
                finally:
                    entry[1] -= 1
                    if not entry[1] and self.arrivals.get(key) is entry:
                        del self.arrivals[key]
            f = self.ended.get(key)
            if f is not None:
                await asyncio.shield(f)
            failed = self.failed.get(key)
            if failed is not None:
                return {"failed": failed}
            if key in self.unready and key not in self.finished:  # sent back unrun: not ended
                unknown.append(key)
        if unknown:
            return {"unknown": unknown}
        pushes = getattr(self.plugin, "pushes", None)
        if reader and rows and pushes is not None:
            pushed = await pushes.for_reader(reader, [(k, self.wrote.get(k, ()), c) for k, c in rows.items() if k in keys])
            if pushed:
                return {"pushed": pushed}
        return {}

    def _passed(self, key: str, passed: asyncio.Future) -> None:
        if not passed.done():
            passed.set_result(None)
        if self.passed.get(key) is passed:  # (not a later run of the same key's)
            del self.passed[key]

    def _unready(self, key: str, answer) -> str:
        """Task ``key`` does not run here: its client is told (it orders the task itself,
        and sends it again), and other workers' tasks that follow it hear it did not end
        here (``ended_here``). On a worker closing, sent back it would come here again:
        instead its client's connection closes, once the tasks that run or ended here are
        answered (at most ``CLOSE_DRAIN`` seconds, ``serve``), and every task the client
        sent on it and did not hear of is stranded as on a worker that died (the GVAT says
        where each runs again, or which chunks went: ``DirectPlane.stranded``)."""
        _remember(self.unready, key, None)
        close = getattr(answer, "close", None) if self._closing() else None
        if close is not None:
            close(key)
        else:
            answer({"key": key, "unready": True})
        return "unready"

    def _behind(self, key: str, n: int) -> None:
        """Count one more (``n`` = 1) or one less (-1) task of this worker that runs as
        soon as task ``key`` ends (``ready``)."""
        with self._waiting_lock:
            n += self.behind.get(key, 0)
            if n:
                self.behind[key] = n
            else:
                self.behind.pop(key, None)

    def _failed(self, key: str, failed: dict) -> None:
        _remember(self.failed, key, failed)

    def _call(self, key, fn, args, indices, results, started, fresh):
        """The task body in a thread of the worker's pool, with its reports kept for the
        event loop to send (``_reports``)."""
        with self._waiting_lock:
            self.waiting -= 1
            self.running.add(key)
            started[0] = True
        if self._closing():  # (its store may be gone already: ``_unready``)
            with self._waiting_lock:
                self.running.discard(key)
            raise _WorkerClosing(key)
        reports: list = []
        _running.task = (self.worker, key, reports, fresh)
        try:
            # (Pickled here, off the event loop: ``dgvm.protocol.task_results``.)
            return task_results.encode(fn(*args, indices, results)), reports
        except BaseException as e:
            e._dgvm_reports = reports
            raise
        finally:
            _running.task = None
            with self._waiting_lock:
                self.running.discard(key)

    async def _reports(self, reports) -> None:
        """Hand the task's reports ((message, urgent, the store's ``exports`` then) each)
        to the GVAT. An urgent one (it
        wrote chunks other workers may hold copies of) is a request, answered once those
        copies were dropped or refreshed; the others go on the worker's stream, in order,
        and the task is answered without waiting for them: no copy of what they wrote
        exists elsewhere, and a copy made from now on is made of the new values."""
        for message, urgent, exports in reports:
            if not urgent:
                streams.send_small(self.worker.batched_stream, message)
                continue
            message = {k: v for k, v in message.items() if k != "op"}
            wait = config.get_seconds("scheduler-wait")
            deadline = time.monotonic() + wait
            while True:
                try:
                    await messages.call(self.worker.scheduler, messages.LAUNCHED, worker=self.worker.address,
                                        **message)
                    store = getattr(self.plugin, "store", None)
                    if message["wrote"] and store is not None:  # every replica of them the GVAT knew of is gone
                        store.copies_dropped(message["alloc_id"], message["wrote"], exports)
                    break
                except Exception as e:  # noqa: BLE001
                    if not comm_error(e):
                        # refused: the allocation was freed meanwhile
                        logger.info("dgvm: the report of task %s was refused", message.get("key"), exc_info=True)
                        break
                    # the scheduler is away: it may come back (``scheduler-wait``)
                    if time.monotonic() > deadline:
                        raise DgvmError(
                            f"the write of task {message.get('key')} to chunks {message['wrote']} of "
                            f"allocation {message['alloc_id']} on {self.worker.address} is done, but no "
                            f"scheduler took its report within {wait:g} s: copies of those chunks on "
                            "other workers may be stale") from None
                    await asyncio.sleep(0.2)

    def ready(self) -> bool:
        """Is a direct task ready here: waiting only for a thread, or to run as soon as a
        task running here now ends (``behind`` it: nothing it follows failed; it may still
        wait for other workers' answers, asked meanwhile)? Either runs on the device's
        stream after the running task's work, so that task may leave its work running
        (``finish_on_device``): in a chain of steps, each reading the last (a stencil, a
        solver), the next step's host work then overlaps this one's device work instead
        of following it. (A task of another worker that waits for the running one does
        not count: nothing here would wait for that work after it.)"""
        with self._waiting_lock:
            return self.waiting > 0 or any(key in self.behind for key in self.running)

    def _settle_device(self) -> None:
        """A task that was to run after another does not run (one it follows failed, it
        goes back unready, or it cannot start): if that one left its device work running
        for it (``ready``), wait for that work on a thread, so that a fault in it is found
        now (and logged), not by some later unrelated task."""
        store = getattr(self.plugin, "store", None)
        if store is None:
            return
        backend = store.backend

        def wait():
            try:
                if not backend.queued.done():
                    backend.synchronize()
            except Exception:  # noqa: BLE001  (the context ended: the next task says so)
                logger.exception("dgvm: device work left running for a task that did not run")

        try:
            asyncio.get_running_loop().run_in_executor(None, wait)
        except Exception:  # noqa: BLE001  (the worker is closing: its threads are gone)
            pass
