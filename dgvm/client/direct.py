"""The direct plane: an operation goes from the caller straight to its home workers.

dgvm pins every task to the worker that holds its chunks and orders tasks itself
(``dgvm.client.ordering``), so Dask's task path (client to scheduler to worker and back,
each hop through the scheduler's task state) is only a messenger, and a slow one. Here
the client keeps one connection per worker (``Channel``) and sends each operation's task
for that worker on it, one message per worker per operation (batched with whatever else
is ready); the worker runs it and answers on the same connection (``dgvm.worker.direct``).

Order. A task follows the earlier tasks ``dispatch`` names. Those of its own worker that
were sent on the same connection travel as keys, and the worker runs it after them; with
``dgvm.dispatch.peers``, those of other workers sent on live connections travel as ``peers``, and the worker asks those
workers when they ended (``dgvm.worker.direct``; a worker that cannot say sends the task
back ``unready``, and it is ordered here). It waits here, before it is sent, for any other
one (not yet sent, on a broken connection, or a Dask future) to end. A task that follows a
failed one fails with its error, as on Dask's path (``dgvm.client.failures``).

Coherence. The worker answers only once the GVAT has the task's report (versions bumped,
stale replicas dropped, backups refreshed): no later task anywhere sees a stale copy.

A worker that leaves. Its connection breaks (or the GVAT says it left first). The tasks
it had not answered are *stranded*: the GVAT, once it removed the worker and copies took
over its chunks (``replicas=k``), says for each whether it runs again where the copies
are (what Dask's path does through ``scheduler.departures``) or fails with ``ChunkLost``
naming the chunks lost. Every wait ends: the GVAT's answer is bounded, and a task that
cannot get one fails saying so.

``DirectTask`` is the plane's future; it answers what dgvm asks of Dask's futures
(``key``, ``status``, ``done``, ``result``, ``exception``), and ``wait``, ``wait_first_failure``
and ``gather`` wait for either kind.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref

from distributed import wait as dask_wait
from distributed.comm import connect
from distributed.core import clean_exception
from distributed.protocol import pickle, to_serialize

from dgvm import config, dask_compat
from dgvm.client.left_workers import LeftWorkers
from dgvm.client.ordering import TaskChunks
from dgvm.protocol import messages
from dgvm.protocol.errors import ChunkLost, ConnectionBroke, DgvmError, KernelError, NotConnected
from dgvm.protocol.task_results import Pickled

logger = logging.getLogger("dgvm.client")

# Seconds the GVAT's answer on stranded tasks may take: it waits for the worker's removal
# and for copies to take over its chunks (``Departures.STRANDED_WAIT`` + ``PROMOTE_WAIT``).
STRANDED_WAIT = 120.0
INLINE_BODY = 1 << 20  # bytes of a pickled task body sent inside its message; larger: a frame

# Threads in ``wait_first_failure``: id -> (the tasks, the event set once they all ended
# or one failed), under ``_news``. A task's end wakes only a thread it completes: a wake
# costs a switch.
_news = threading.Lock()
_waiters: dict = {}
_unpickling = threading.Lock()  # (a result unpickled once, whoever asks first)


def enabled() -> bool:
    """Whether operations take the direct plane (``dgvm.dispatch.plane``)."""
    return config.get("dispatch.plane") == "direct"


class DirectTask:
    """One worker's task of one operation on the direct plane: a future."""

    __slots__ = ("key", "worker", "status", "_value", "_tb", "_event", "_callbacks", "_on_sent",
                 "call", "deps", "channel", "written", "by_client", "fresh", "push_to", "__weakref__")

    def __init__(self, key: str, worker: str, call: tuple, deps: list):
        self.key = key
        self.worker = worker  # where it runs (another worker when it runs again)
        self.status = "pending"  # then "finished" or "error"
        self._value = None  # its result, or its exception
        self._tb = None
        self._event = threading.Event()
        self._callbacks: list = []  # called on the client's event loop when it ends
        self._on_sent: list = []  # called on the loop once it is handed to its connection
        # (pickled (fn, args), indices, allocations, rerun, results): kept until it ends,
        # to run again
        self.call = call
        self.deps = deps  # the tasks it follows, until it ends
        self.channel = None  # the connection it was sent on
        self.written = None  # run again: what its first run wrote for good
        # Ordered after other workers' tasks here, not by those workers (``unready``).
        self.by_client = False
        # Tasks of other workers it follows that were the last to write some chunks (``last_writers``),
        # once known; and the workers whose tasks read pieces of what it writes next
        # (``dgvm.worker.pushes``)
        self.fresh: dict = {}
        self.push_to: dict = {}  # worker -> the chunks named for it

    def __repr__(self):
        return f"<DirectTask {self.key} on {self.worker}: {self.status}>"

    def done(self) -> bool:
        return self.status != "pending"

    def result(self, timeout=None):
        """The task's result; its error raised, with the worker's traceback."""
        if not self._event.wait(timeout):
            raise TimeoutError(f"dgvm task {self.key} did not end within {timeout} s")
        if self.status == "error":
            raise self._value.with_traceback(self._tb)
        if isinstance(self._value, Pickled):  # (here, in the thread that asks, not on the loop)
            with _unpickling:
                if isinstance(self._value, Pickled):
                    try:
                        self._value = self._value.value()
                    except Exception as e:
                        raise DgvmError(f"the result of dgvm task {self.key} (from {self.worker}) "
                                        f"could not be unpickled here: {type(e).__name__}: {e}") from e
        return self._value

    def exception(self, timeout=None):
        if not self._event.wait(timeout):
            raise TimeoutError(f"dgvm task {self.key} did not end within {timeout} s")
        return self._value if self.status == "error" else None

    def traceback(self):
        return self._tb if self.status == "error" else None

    def _end(self, status: str, value, tb=None) -> None:
        """(On the client's event loop.)"""
        if self.status != "pending":
            return
        self._value, self._tb, self.status = value, tb, status
        self.call = self.deps = self.channel = None
        self.fresh, self.push_to = {}, {}
        self._on_sent = []  # (those waiting for it to be sent heard of its end: ``on_end``)
        self._event.set()
        if _waiters:  # (read unlocked: a waiter registered after this sees the status)
            with _news:
                for tasks, over in _waiters.values():
                    if not over.is_set() and any(t is self for t in tasks) and _over(tasks):
                        over.set()
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # noqa: BLE001
                logger.exception("dgvm: a callback of task %s", self.key)

    def _fail(self, error: Exception, tb=None) -> None:
        self._end("error", error, tb)

    def on_end(self, fn) -> None:
        """Call ``fn(self)`` once the task ended: on the loop, or here if it has. Called on
        the loop, once; from another thread it may be called twice (the task may end
        while this runs)."""
        self._callbacks.append(fn)
        if self.done():  # (its callbacks may have been taken before the append)
            fn(self)
            try:
                self._callbacks.remove(fn)  # (if they were not: kept for nothing)
            except ValueError:
                pass

    def _sent(self) -> None:
        """(On the loop.) It was handed to its connection: the tasks of its worker that
        waited for that go after it on the same connection (each placed in a loop
        callback of its own: ``_try_place``)."""
        waiting, self._on_sent = self._on_sent, []
        for fn in waiting:
            fn(self)


class Channel:
    """The client's connection to one worker: tasks out, answers back, in order."""

    def __init__(self, plane: "DirectPlane", address: str):
        self.plane = plane
        self.address = address
        self.comm = None
        self.queue: list = []  # messages not written yet
        self.tasks: dict = {}  # key -> task sent here and not answered
        self.broken = False
        self._flushing = False

    def send(self, task: DirectTask, msg: dict) -> None:
        """(On the loop.) Send ``task``'s message after those sent before it."""
        task.channel = self
        self.tasks[task.key] = task
        self.control(msg)
        task._sent()

    def control(self, msg: dict) -> None:
        """(On the loop.) Send ``msg`` after those sent before it (a task's, or one about
        a task sent before)."""
        self.queue.append(msg)
        if not self._flushing:
            self._flushing = True
            asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            if self.comm is None:
                await self._connect()
            while self.queue and not self.broken:
                batch, self.queue = self.queue, []
                await self.comm.write(batch)
        except Exception as e:  # noqa: BLE001  (its worker went, or the connection broke)
            self.close(e)
        finally:
            self._flushing = False

    async def _connect(self) -> None:
        client = self.plane.client
        timeout = config.get_seconds("connect-timeout")
        peers = self.plane.session.part(LeftWorkers).peers
        self.comm = await peers.call(
            self.address,
            connect(self.address, timeout=timeout, **client.connection_args),
            lambda: ConnectionError(f"worker {self.address} left the cluster"))
        if self.broken:  # closed while it connected
            self.comm.abort()
            return
        # Its messages are small (arrays travel as frames, unpacked or not): Dask's walk of
        # each message's size, to decide whether to serialize it on a thread, costs more
        # than the serializing. (The worker's end does the same, ``DirectTasks.serve``.)
        self.comm.allow_offload = False
        await self.comm.write({"op": messages.DIRECT, "client": client.id, "reply": False})
        asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        comm = self.comm
        try:
            while True:
                for answer in await comm.read():
                    task = self.tasks.pop(answer["key"], None)
                    if task is None:
                        continue
                    if answer.get("unready"):  # sent back unrun: ordered here, then sent again
                        task.channel, task.by_client = None, True
                        self.plane._place(task)
                    elif "result" in answer:
                        task._end("finished", answer["result"])
                    elif "pickled" in answer:
                        task._end("finished", Pickled(answer["pickled"]))
                    else:
                        _, exc, tb = clean_exception(**answer)
                        task._fail(exc, tb)
        except Exception as e:  # noqa: BLE001
            self.close(e)

    def close(self, why: Exception | None = None) -> None:
        """(On the loop.) The connection is done: its unanswered tasks are stranded
        (``why`` given: it broke) or fail (the session closes)."""
        if self.broken:
            return
        self.broken = True
        if self.plane.channels.get(self.address) is self:
            del self.plane.channels[self.address]
        stranded = list(self.tasks.values())
        self.tasks.clear()
        self.queue.clear()
        if self.comm is not None:
            self.comm.abort()
        if stranded:
            asyncio.ensure_future(self.plane.stranded(self.address, stranded, why))


def _by_peers(task: DirectTask) -> bool:
    """Do other workers' tasks that ``task`` follows, sent on live connections, go with it
    as ``peers`` (its worker asks theirs when they ended), rather than being waited for
    here? Not for a task that takes their results, or one sent back ``unready``."""
    return bool(not task.call[4] and not task.by_client and config.get("dispatch.peers"))


class DirectPlane:
    """A session part: the session's connections to workers and its tasks in flight."""

    def __init__(self, session):
        self.session = session
        self.client = session.client
        self.channels: dict[str, Channel] = {}
        self.tasks: "weakref.WeakSet[DirectTask]" = weakref.WeakSet()  # not all ended
        self.closed = False
        # Workers the GVAT said left: a task for one is stranded at once (a connection to a
        # dead address is retried up to the connect timeout), unless the GVAT says a
        # worker registered at that address since (``stranded``: "retry").
        self.left: set[str] = set()
        session.part(LeftWorkers).on_left(self._left)
        dask_compat.on_client_close(self.client, self.close)

    def submit(self, fn, args: tuple, homes: dict, deps: list, keys: list, rerun: str,
               allocations: list, results: bool = False) -> list[DirectTask]:
        """One task ``keys[i]``, ``fn(*args, indices, after)``, per worker of ``homes``
        (worker -> chunk indices), each following ``deps[i]``; ``after`` is the list of
        their results if ``results``, else None. Returns the tasks (futures) at once."""
        # The body and its arguments, pickled once here for every worker (the caller's
        # thread, off the event loop, which sends them): an error fails the tasks.
        try:
            body = pickle.dumps((fn, args))
        except Exception as e:  # noqa: BLE001
            body = e
        else:
            if len(body) > INLINE_BODY:  # (a frame of its own, not inside the message)
                body = to_serialize(body)
        tasks = [DirectTask(key, worker, (body, list(idx), allocations, rerun, results), list(after))
                 for (worker, idx), after, key in zip(homes.items(), deps, keys)]
        if not results and config.get("transfer.push-pieces"):
            # (Here, in the program's order: the last writers of chunks as of this task.)
            touched = self.session.part(TaskChunks)
            for t in tasks:
                t.fresh = touched.last_writers(t.deps, t.worker)
        self.tasks.update(tasks)
        if self.closed:  # (its loop may run no callback any more)
            for t in tasks:
                t.status, t._value, t.call, t.deps = "error", NotConnected(f"dgvm task {t.key}: its client closed"), None, None
                t._event.set()
            return tasks
        self.client.loop.add_callback(self._place_all, list(tasks))
        return tasks

    def _place_all(self, tasks) -> None:
        for t in tasks:
            if t.fresh:
                try:
                    self._ask_pushes(t)
                except Exception:  # noqa: BLE001  (its reads ask instead; it is placed all the same)
                    logger.exception("dgvm: asking for the pieces task %s reads", t.key)
            self._place(t)

    def _place(self, task: DirectTask) -> None:
        """(On the loop.) Send ``task`` once the tasks it follows allow: those of its
        worker sent on its live connection go with it as keys; any other it waits for
        (every one, when it takes their results)."""
        try:
            self._try_place(task)
        except Exception as e:  # noqa: BLE001  (never a task that does not end)
            logger.exception("dgvm: sending task %s", task.key)
            task._fail(e)

    def _try_place(self, task: DirectTask) -> None:
        if task.done():
            return
        if self.closed:
            task._fail(NotConnected(f"dgvm task {task.key}: its client closed"))
            return
        channel = self.channels.get(task.worker)
        results = task.call[4]
        by_peers = _by_peers(task)
        waiting, unsent, after, peers = [], [], [], {}
        for d in task.deps:
            if d.done():
                continue
            if isinstance(d, DirectTask) and not results and channel is not None and d.channel is channel:
                after.append(d.key)  # (sent before it on its connection: its worker orders them)
                continue
            if isinstance(d, DirectTask) and not results and d.channel is None and d.worker == task.worker:
                # Of its worker, still waiting here to be sent: it goes right after that
                # one, on the same connection, instead of waiting for it to end.
                unsent.append(d)
                continue
            if (by_peers and isinstance(d, DirectTask) and d.channel is not None and not d.channel.broken
                    and d.channel.address != task.worker):
                peers.setdefault(d.channel.address, []).append(d.key)
                continue
            waiting.append(d)
        if waiting or unsent:
            left = [len(waiting) + len(unsent)]

            def one_ended(_):
                left[0] -= 1
                if left[0] == 0:  # (in a callback of its own: a long chain of them,
                    # sent or failing, would otherwise place each inside the last one's call)
                    asyncio.get_running_loop().call_soon(self._place, task)

            for d in waiting:
                self._when_done(d, one_ended)
            for d in unsent:  # (sent, or ended unsent: a failure, its client closing)
                fired = [False]

                def once(_, fired=fired):
                    if not fired[0]:
                        fired[0] = True
                        one_ended(_)

                d._on_sent.append(once)
                d.on_end(once)
            return
        failed = next((d for d in task.deps if d.status in ("error", "cancelled", "lost")), None)
        if failed is not None:  # it fails with the error of the task it follows
            try:
                error, tb = failed.exception(timeout=0), failed.traceback()
            except Exception as e:  # noqa: BLE001  (cancelled, lost)
                error, tb = e, None
            task._fail(error, tb)
            return
        body, idx = task.call[:2]
        if isinstance(body, Exception):
            task._fail(body)
            return
        msg = {
            "key": task.key,
            "after": after,
            "peers": peers,
            "task": body,
            "indices": idx,
            # (NumPy buffers travel out of band)
            "results": to_serialize([d.result(timeout=0) for d in task.deps]) if results else None,
            "written": task.written,
        }
        if task.fresh:  # pieces other workers' homes pushed that it may take
            msg["fresh"] = task.fresh
        if task.push_to:
            msg["push_to"] = {w: sorted(c) for w, c in task.push_to.items()}
        if channel is None:
            if task.worker in self.left:
                asyncio.ensure_future(self.stranded(task.worker, [task], None, sent=False))
                return
            channel = self.channels[task.worker] = Channel(self, task.worker)
        channel.send(task, msg)

    def _ask_pushes(self, task: DirectTask) -> None:
        """(On the loop, as ``task`` is first placed.) Have each task of another worker
        that its client named as the last writer of some chunks (``task.fresh``) send
        ``task``'s worker, once it ended, the pieces that worker read before of those
        chunks (``dgvm.worker.pushes``): in its message if not sent yet, else in a message
        of its own (at once if it ended); with ``peers``, the answer to the question
        ``task``'s worker asks brings those of a task still running."""
        by_peers = _by_peers(task)
        for d in task.deps:
            named = task.fresh.get(d.key)
            if named is None:
                continue
            if not d.done() and d.channel is None:
                d.push_to.setdefault(task.worker, set()).update(named[2])
                continue
            channel = d.channel if not d.done() else self.channels.get(d.worker)
            if channel is not None and not channel.broken and (d.done() or not by_peers):
                channel.control({"push": d.key, "to": task.worker, "chunks": named[2]})

    def _when_done(self, dep, fn) -> None:
        if isinstance(dep, DirectTask):
            dep.on_end(fn)
        else:  # a Dask future: its callbacks run in a thread of their own
            loop = self.client.loop
            dep.add_done_callback(lambda f: loop.add_callback(fn, f))

    def _left(self, address: str) -> None:
        """(On the loop.) The GVAT says the worker at ``address`` left."""
        self.left.add(address)
        channel = self.channels.get(address)
        if channel is not None:
            channel.close(ConnectionError(f"worker {address} left the cluster"))

    async def stranded(self, address: str, tasks: list, why, sent: bool = True) -> None:
        """``tasks`` were sent to the worker at ``address`` (or were to be) and it did not
        answer: ask the GVAT what becomes of each (``messages.STRANDED``), then send it
        again where it says, or fail it."""
        client = self.client
        asked = [{"key": t.key, "allocations": t.call[2], "rerun": t.call[3]} for t in tasks if not t.done()]
        try:
            answers = await asyncio.wait_for(
                messages.call(client.scheduler, messages.STRANDED, worker=address, tasks=asked, sent=sent),
                STRANDED_WAIT)
        except Exception as e:  # noqa: BLE001  (the scheduler went too, or is slow)
            for t in tasks:
                t._fail(ConnectionBroke(
                    f"dgvm task {t.key}: the connection to worker {address} broke ({why}) and the "
                    f"GVAT did not say what became of it ({type(e).__name__}: {e})"))
            return
        for t in tasks:
            answer = answers.get(t.key)
            if t.done():
                continue
            if answer is None:  # (the GVAT answers every task it was asked about)
                t._fail(ConnectionBroke(f"dgvm task {t.key}: the GVAT did not say what became of it "
                                        f"after the connection to {address} broke"))
                continue
            if "retry" in answer:  # a worker registered at that address since: send it there
                self.left.discard(address)
                self._place(t)
            elif "rerun" in answer:
                logger.info("dgvm: task %s runs again on %s (%s left)", t.key, answer["rerun"], address)
                t.worker, t.channel, t.written = answer["rerun"], None, answer["written"]
                self._place(t)
            elif "failed" in answer:
                t._fail(KernelError(answer["failed"]))
            elif "lost" in answer:
                t._fail(ChunkLost(answer["lost"]))
            else:
                t._fail(ConnectionBroke(answer["broke"]))

    def close(self) -> None:
        """(On the loop, as the client closes.) Close every connection; every task not
        ended fails (those in flight and those waiting here to be sent)."""
        self.closed = True
        for channel in list(self.channels.values()):
            channel.tasks.clear()
            channel.close()
        while True:
            try:
                tasks = list(self.tasks)
                break
            except RuntimeError:  # (the program's thread added one meanwhile)
                continue
        for t in tasks:
            t._fail(NotConnected(f"dgvm task {t.key}: its client closed before it ended on {t.worker}"))


# -- waiting for tasks of either plane -------------------------------------------------------

def _split(futures):
    direct = [f for f in futures if isinstance(f, DirectTask)]
    dask = [f for f in futures if not isinstance(f, DirectTask)]
    return direct, dask


def wait(futures, timeout: float | None = None) -> None:
    """Wait for every one of ``futures`` to end (``TimeoutError`` past ``timeout``)."""
    direct, dask = _split(futures)
    deadline = None if timeout is None else time.monotonic() + timeout
    if dask:
        dask_wait(dask, timeout=timeout)
    for f in direct:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not f._event.wait(left):
            raise TimeoutError(f"dgvm task {f.key} did not end within {timeout} s")


def wait_first_failure(futures) -> list:
    """Wait until one of ``futures`` fails or all of them ended (Dask's: until one
    ends); return those still running."""
    direct, dask = _split(futures)
    if not direct:
        return list(dask_wait(dask, return_when="FIRST_COMPLETED").not_done)
    if dask:  # (mixed: rare) one kind after the other
        running = list(dask_wait(dask, return_when="FIRST_COMPLETED").not_done)
        return running + [f for f in direct if not f.done()]

    over = threading.Event()
    with _news:  # (registered before it looks: a task that ends meanwhile finds it)
        _waiters[id(over)] = (direct, over)
        if _over(direct):
            over.set()
    try:
        over.wait()
    finally:
        with _news:
            _waiters.pop(id(over), None)
    return [f for f in direct if not f.done()]


def _over(tasks) -> bool:
    """Have ``tasks`` all ended, or one failed?"""
    return all(f.done() for f in tasks) or any(f.status == "error" for f in tasks)


async def ended(client, futures) -> None:
    """(On the client's loop.) Wait for every one of ``futures`` to end, failed or not."""
    direct, dask = _split(futures)
    if dask:
        from dgvm import dask_compat

        await dask_compat.gather_skipping_errors(client, dask)
    loop = asyncio.get_running_loop()
    waits = []
    for f in direct:
        if not f.done():
            w = loop.create_future()
            f.on_end(lambda _, w=w: w.done() or w.set_result(None))
            waits.append(w)
    if waits:
        await asyncio.wait(waits)


def gather(client, futures, direct: bool = False) -> list:
    """The results of ``futures`` in order; the first error raised."""
    if not any(isinstance(f, DirectTask) for f in futures):
        return client.gather(futures, direct=direct)
    wait(futures)
    return [f.result() for f in futures]
