"""Every use dgvm makes of Dask's private API (and of one private hook of Python's), in one place.

dgvm reaches under Dask's public surface where Dask offers no public way to do what it
needs. Each function or class here says what it relies on; ``tests/test_dask_compat.py``
fails when a Dask release changes it, so that an upgrade breaks there and not in a
program. Shared by the client, scheduler, worker and deploy sides; imports dask and
distributed only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time

import dask.config
from distributed import Client
from distributed.active_memory_manager import ReduceReplicas
from distributed.batched import BatchedSend
from distributed.core import Status
from distributed.deploy.cluster import Cluster
from distributed.protocol import pickle
from distributed.worker_state_machine import FreeKeysEvent

logger = logging.getLogger("dgvm.worker")

# -- client ------------------------------------------------------------------------------


def close_cluster_with_client(client: Client) -> None:
    """Make ``client.close()`` close the cluster object it was given, as it does for a
    cluster it started itself (``Client._start_arg`` is None then)."""
    client._start_arg = None


def scheduler_id(client: Client) -> str | None:
    """The id of the scheduler ``client`` is connected to (a new one after the scheduler
    restarted and the client reconnected)."""
    return (getattr(client, "_scheduler_identity", None) or {}).get("id")


def on_client_close(client: Client, fn) -> None:
    """Call ``fn()`` on the client's event loop when ``client`` starts closing (Dask has no
    client-side close hook: its ``_close`` is replaced on this instance, every way of
    closing goes through it)."""
    close = client._close

    @functools.wraps(close)
    async def _close(*args, **kwargs):
        try:
            fn()
        except Exception:  # noqa: BLE001  (the client closes all the same)
            logger.exception("dgvm: closing with client %s", client.id)
        return await close(*args, **kwargs)

    client._close = _close


async def gather_skipping_errors(client: Client, futures) -> list:
    """Wait for ``futures`` on the client's event loop and return the results of those
    that succeeded; failed ones are left out without raising (``Client._gather``,
    ``errors="skip"``: the public ``gather`` blocks when called from the loop)."""
    return await client._gather(futures, errors="skip")


# -- scheduler ---------------------------------------------------------------------------


def prefix_duration(scheduler, name: str) -> float | None:
    """Dask's estimate of the seconds one task of key prefix ``name`` takes, or None when
    Dask never timed one (``Scheduler._get_prefix_duration``, ``TaskPrefix``'s
    ``duration_average`` and ``max_exec_time``)."""
    prefix = scheduler.task_prefixes.get(name)
    if prefix is None or (prefix.duration_average < 0 and prefix.max_exec_time <= 0):
        return None
    return scheduler._get_prefix_duration(prefix)


def queued_prefixes(ws) -> dict[str, int]:
    """Key prefix -> tasks of it assigned to Dask's worker ``ws`` and not finished
    (``WorkerState.task_prefix_count``)."""
    return ws.task_prefix_count


def stranded_on(scheduler, key) -> set | None:
    """The workers task ``key`` was pinned to, if it waits in Dask's ``no-worker`` state
    with none of them in the cluster (it can never run), or stays ``released`` though
    wanted (its result was lost and a task it followed failed since: Dask computes it
    neither again nor ever, ``Scheduler._transition_memory_released``); else None
    (``TaskState.worker_restrictions``, ``Scheduler.workers``)."""
    ts = scheduler.tasks.get(key)
    if ts is None or not ts.worker_restrictions:
        return None
    if ts.state != "no-worker" and not (ts.state == "released" and (ts.who_wants or ts.waiters)):
        return None
    pinned = set(ts.worker_restrictions)
    return None if any(a in scheduler.workers for a in pinned) else pinned


class ReduceReplicasKeepingPinned(ReduceReplicas):
    """Dask's ``ReduceReplicas`` (the active memory manager's policy that drops the extra
    replicas of a task's result, copied to the workers of the tasks that followed it),
    except that it never drops the replica of a task keyed ``prefix...`` on the worker the
    task is pinned to (``TaskState.worker_restrictions``): the result stays where the task
    ran for as long as that worker lives.

    Dask forgets a result once its last replica goes. Were the one kept on another worker,
    and that worker left, Dask would run the finished task again on its own worker (a write
    done twice), or, if a task it followed failed since, leave it ``released`` for ever: its
    future would never end, nor anything that waits for it (a wait, a free, the release
    of an array it wrote). (``ActiveMemoryManagerPolicy.run``: a generator of
    ``Suggestion``s, each sent back the worker the manager chose among its ``candidates``,
    None: any holder.)"""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def run(self):
        suggestions = super().run()
        chosen = None
        while True:
            try:
                s = suggestions.send(chosen)
            except StopIteration:
                return
            ts = s.ts
            if (s.op == "drop" and ts.worker_restrictions and isinstance(ts.key, str)
                    and ts.key.startswith(self.prefix)):
                holders = ts.who_has if s.candidates is None else s.candidates
                s = s._replace(candidates={ws for ws in holders or () if ws.address not in ts.worker_restrictions})
            chosen = yield s


def keep_pinned_results(scheduler, prefix: str) -> None:
    """Make the scheduler's active memory manager (its extension ``amm``, whose policies
    Dask's config names) keep the results of tasks keyed ``prefix...`` where they ran:
    its ``ReduceReplicas`` becomes ``ReduceReplicasKeepingPinned``."""
    amm = scheduler.extensions.get("amm")
    if amm is None:
        return
    for policy in list(amm.policies):
        if type(policy) is ReduceReplicas:
            amm.policies.discard(policy)
            amm.add_policy(ReduceReplicasKeepingPinned(prefix))


def annotation(scheduler, key, name: str, default=None):
    """Task ``key``'s annotation ``name`` (``TaskState.annotations``)."""
    ts = scheduler.tasks.get(key)
    return default if ts is None else ts.annotations.get(name, default)


def fail_waiting_task(scheduler, key, error: Exception, stimulus_id: str) -> None:
    """Fail task ``key``, waiting in Dask's ``no-worker`` (or ``released``) state, with
    ``error`` (its client's future raises it; the tasks that depend on it fail too), as Dask fails a task
    that killed too many workers in ``Scheduler.remove_worker`` (``Scheduler.transition``
    to ``erred`` with a pickled exception, then ``transitions`` of what it recommends)."""
    ts = scheduler.tasks[key]
    if ts.state == "released":  # (``Scheduler._transition_released_erred`` takes no cause)
        ts.exception, ts.exception_text, ts.exception_blame = pickle.dumps(error), repr(error), ts
        ts.traceback, ts.traceback_text = None, ""
        recommendations = scheduler.transition(key, "erred", stimulus_id)
    else:
        recommendations = scheduler.transition(
            key, "erred", stimulus_id, cause=key, exception=pickle.dumps(error), traceback=None,
            exception_text=repr(error), traceback_text="",
        )
    scheduler.transitions(recommendations, stimulus_id)


def repin_stranded_task(scheduler, key, worker: str, stimulus_id: str) -> bool:
    """Pin task ``key``, waiting in Dask's ``no-worker`` state for a worker that left, to
    ``worker`` instead and let it run there (``TaskState.worker_restrictions``, then
    ``Scheduler.transitions`` to ``processing``, which ``decide_worker_non_rootish``
    honours). Whether it is processing there now."""
    ts = scheduler.tasks.get(key)
    if ts is None or ts.state != "no-worker" or worker not in scheduler.workers:
        return False
    ts.worker_restrictions = {worker}
    scheduler.transitions({key: "processing"}, stimulus_id)
    return ts.state == "processing"


# -- worker ------------------------------------------------------------------------------


def ready_task_keys(worker):
    """Keys of the tasks ready to run on ``worker``, waiting only for a thread
    (``worker.state.ready`` and ``.constrained``, owned by its event loop: iterating from
    a task's thread may raise RuntimeError when the loop changes one meanwhile)."""
    for tasks in (worker.state.ready, worker.state.constrained):
        for ts in tasks:
            yield ts.key


class SchedulerLossHooks:
    """What a worker that outlives its scheduler does (``outlive_scheduler``): ``lost()``
    when the scheduler's stream broke (its Dask task state is dropped after it),
    ``drained()`` once the tasks running then ended,
    ``back()`` once it is registered with a scheduler at the same address again."""

    def lost(self) -> None:
        """The scheduler is gone."""

    def drained(self) -> None:
        """The tasks that were running when it went have ended."""

    def back(self) -> None:
        """Registered with the scheduler that came back."""


#: the reason Dask's ``Worker.handle_scheduler`` closes its worker with, once the stream ends
SCHEDULER_STREAM_BROKEN = "worker-handle-scheduler-connection-broken"


def outlive_scheduler(worker, wait: float, hooks: SchedulerLossHooks | None = None) -> None:
    """Make ``worker`` outlive the loss of its scheduler: when the scheduler's stream breaks
    (not when the scheduler closed it: a ``close`` it sent closes the worker first), the
    worker process and what its plugins hold stay; Dask's own state of it goes (its tasks
    and their results: a new scheduler knows none of them); and it registers again with the
    scheduler that comes back at the same address. If none comes back within ``wait``
    seconds (or its Dask state does not drain by then), it closes as Dask's worker does.

    Dask's ``Worker.handle_scheduler`` reads the stream and, once it ends, calls
    ``self.close(reason="worker-handle-scheduler-connection-broken")``: that call, and only
    that one, is taken over on the instance (so that it works also after the worker
    registered, for a plugin installed then). Re-registering needs no task or data left
    (``Worker._register_with_scheduler`` asserts so: Dask itself does not reconnect
    workers): every key is released (``FreeKeysEvent``; running tasks finish first), and
    the heartbeat and keep-alive stop meanwhile (a heartbeat the new scheduler answers
    "missing" would close the worker). The broken ``BatchedSend`` cannot start again
    (``please_stop`` stays set): a new one takes its place, which ``hooks.back`` may tune.
    ``_register_with_scheduler`` starts ``handle_scheduler`` on the new stream."""
    hooks = hooks or SchedulerLossHooks()
    close = getattr(worker.close, "dask_close", worker.close)  # (Dask's, if done before)

    @functools.wraps(close)
    async def close_unless_rejoined(*args, reason: str = "worker-close", **kwargs):
        if (reason == SCHEDULER_STREAM_BROKEN and worker.status in (Status.running, Status.paused)
                and await _rejoin(worker, wait, hooks)):
            return None
        return await close(*args, reason=reason, **kwargs)

    close_unless_rejoined.dask_close = close
    worker.close = close_unless_rejoined


async def _rejoin(worker, wait: float, hooks: SchedulerLossHooks) -> bool:
    """Drop Dask's task state and register with the scheduler at the same address again;
    False if that took more than ``wait`` seconds."""
    deadline = time.monotonic() + wait
    for name in ("heartbeat", "keep-alive"):
        worker.periodic_callbacks[name].stop()
    logger.warning("dgvm: %s lost its scheduler %s; it stays up and waits up to %.0f s for a "
                   "scheduler at that address", worker.address, worker.scheduler.address, wait)
    try:
        hooks.lost()
    except Exception:  # noqa: BLE001
        logger.exception("dgvm: after losing the scheduler")
    keys = list(worker.state.tasks)
    if keys:
        worker.handle_stimulus(FreeKeysEvent(keys=keys, stimulus_id=f"dgvm-scheduler-lost-{time.time()}"))
    while worker.state.tasks or worker.data:  # running tasks finish, then are forgotten
        if time.monotonic() > deadline:
            logger.error("dgvm: %s still holds %d Dask tasks %.0f s after its scheduler left",
                         worker.address, len(worker.state.tasks), wait)
            return False
        await asyncio.sleep(0.05)
        if worker.status not in (Status.running, Status.paused):
            return False
    try:
        hooks.drained()
    except Exception:  # noqa: BLE001
        logger.exception("dgvm: after the tasks of the lost scheduler ended")
    # (``BatchedSend.interval`` is in seconds; its argument a number of ms or a string)
    worker.batched_stream = BatchedSend(interval=f"{worker.batched_stream.interval * 1000}ms", loop=worker.loop)
    try:
        await asyncio.wait_for(worker._register_with_scheduler(), max(deadline - time.monotonic(), 0.1))
    except Exception as e:  # noqa: BLE001  (none came back in time; or it refused this worker)
        logger.error("dgvm: no scheduler came back at %s within %.0f s (%r): %s closes",
                     worker.scheduler.address, wait, e, worker.address)
        return False
    try:
        hooks.back()
    except Exception:  # noqa: BLE001
        logger.exception("dgvm: after registering with the new scheduler")
    return True


# -- deploy ------------------------------------------------------------------------------

#: the environment variable through which Dask hands its configuration to a child process
INHERIT_CONFIG = "DASK_INTERNAL_INHERIT_CONFIG"


def inherited_config_env() -> dict[str, str]:
    """Environment that gives a child process this process's Dask configuration, as
    Dask's nannies give theirs to workers."""
    return {INHERIT_CONFIG: dask.config.serialize(dask.config.global_config)}


class SpecClusterHooks:
    """A mixin before a ``SpecCluster`` class: ``starting``, ``correcting_state`` and
    ``closing`` run first in its private steps ``_start``, ``_correct_state_internal``
    and ``_close``; ``keeps_lost_worker`` decides its private ``_update_worker_status``'s
    close of a worker that left."""

    async def starting(self) -> None:
        """Before the cluster starts its scheduler."""

    async def correcting_state(self) -> None:
        """Before the cluster starts or stops workers to match its worker spec."""

    async def closing(self) -> None:
        """Before the cluster closes its workers and scheduler."""

    async def _start(self):
        await self.starting()
        await super()._start()

    async def _correct_state_internal(self):
        await self.correcting_state()
        await super()._correct_state_internal()

    async def _close(self):
        await self.closing()
        await super()._close()

    def keeps_lost_worker(self, name) -> bool:
        """Whether the entry ``name`` of ``self.workers`` (a nanny, or a worker in this
        process) stays when its worker left the scheduler. Dask's ``SpecCluster`` closes
        and drops it once ``distributed.deploy.lost-worker-timeout`` passed with no worker
        of that name back (for a job that died): that, unless this says True."""
        return False

    def _update_worker_status(self, op, msg):
        # ``Cluster._update_worker_status`` keeps ``scheduler_info``; on a removal
        # ``SpecCluster``'s schedules that close first: skipped for a kept entry.
        info = self.scheduler_info["workers"].get(msg) if op == "remove" else None
        if info is not None and self.keeps_lost_worker(info.get("name")):
            Cluster._update_worker_status(self, op, msg)
        else:
            super()._update_worker_status(op, msg)

    async def close_now(self) -> None:
        """Close the cluster from within one of its steps (``_close``)."""
        await self._close()

    def start_workers_now(self) -> None:
        """Start the workers of the worker spec and wait for them (``_correct_state``;
        ``scale`` only schedules the start)."""
        self.sync(self._correct_state)


# -- process -----------------------------------------------------------------------------


def when_main_thread_ends(fn, *args) -> None:
    """Call ``fn(*args)`` when the program's main thread ends, before Python shuts its
    thread pools down (``threading._register_atexit``; later ones run first). A cluster
    running in this process needs those pools to finish the work in flight, and ``atexit``
    runs after they refused it: Dask then logs each refused step as an error."""
    threading._register_atexit(functools.partial(fn, *args))
