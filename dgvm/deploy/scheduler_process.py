"""A ``dgvm.LocalCluster`` scheduler in a process of its own (``scheduler_process=True``).

Dask's local clusters run the scheduler on the event loop of the process that made the
cluster, so the program's thread and the scheduler share one interpreter lock. A NumPy-style
loop that starts an operation per line keeps both busy: on two GPUs, chains of elementwise
operations run back to back spent as much CPU in that one process as they took time
(``benchmarks/task_timeline.py``). In its own process the scheduler gets a core of its own.

The process runs ``distributed.Scheduler`` through Dask's ``dask spec`` entry point, with
this process's Dask configuration (the way Dask's nannies hand it to workers) and module
path; its log goes to a temporary file, shown if it fails to start. This module is also
one of its preloads (``dask_setup``): it closes the scheduler when this process is gone,
however it ended, and logs at the level ``LocalCluster(silence_logs=...)`` asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import time

from distributed.deploy.spec import ProcessInterface
from tornado.ioloop import PeriodicCallback

from dgvm import dask_compat, gc_pauses
from dgvm.protocol.errors import DgvmError

# Scheduler options of Dask's local clusters that a process of its own cannot take (Python
# objects, or a TLS set-up made here), and whose defaults it does not need.
_DROPPED_IF_UNSET = ("services", "service_kwargs", "security")


PARENT = "DGVM_SCHEDULER_PARENT"  # the parent's pid, as the child's environment says
LOG_LEVEL = "DGVM_SCHEDULER_LOG_LEVEL"
WATCH_INTERVAL = 1.0  # seconds between looks at the parent


def spec(options: dict, log_level: int | None = None) -> dict:
    """The cluster's scheduler spec (``cls``: the in-process Scheduler, ``options``) for a
    scheduler in its own process, whose ``distributed`` loggers log at ``log_level``.
    Raises ValueError for options it cannot pass there."""
    opts = {"preload": [*(options.get("preload") or []), __name__]}
    for key, value in options.items():
        if key in _DROPPED_IF_UNSET and not _set(value):
            continue
        # Set ones of those (security=True too: its certificates are made here) and Python
        # objects do not travel to another process.
        if key in _DROPPED_IF_UNSET or not _jsonable(value):
            raise ValueError(
                f"scheduler_process=True cannot pass the scheduler option {key}={value!r} to "
                "another process; start the scheduler with `dgvm scheduler` instead"
            )
        if key != "preload":
            opts[key] = value
    return {"cls": SchedulerProcess, "options": {"options": opts, "log_level": log_level}}


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def _set(value) -> bool:
    """Is this option more than its default? (Dask passes a Security without TLS.)"""
    if hasattr(value, "require_encryption"):  # a distributed.Security
        return bool(value.require_encryption or value.tls_ca_file or value.tls_scheduler_cert)
    return bool(value)


class SchedulerProcess(ProcessInterface):
    """``distributed.Scheduler(**options)`` in a child process, for a ``SpecCluster``.

    Dask's own ``SubprocessScheduler`` (``distributed.deploy.subprocess``) starts it the
    same way, but passes no configuration or module path, logs to a pipe nobody reads
    (the child blocks once it fills) and stops it with SIGKILL."""

    START_TIMEOUT = 60  # seconds
    STOP_TIMEOUT = 10

    def __init__(self, options: dict, log_level: int | None = None):
        super().__init__()
        self.options = options
        self.log_level = log_level
        self.process = None
        self._log = None
        self._file = None

    async def start(self):
        fd, self._file = tempfile.mkstemp(prefix="dgvm-scheduler-", suffix=".json")
        os.close(fd)
        os.unlink(self._file)  # the scheduler writes it once it listens
        self._log = tempfile.TemporaryFile()
        env = {
            **os.environ,
            **dask_compat.inherited_config_env(),
            # Preloads and functions run on the scheduler import as they do here.
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            PARENT: str(os.getpid()),
        }
        if self.log_level is not None:
            env[LOG_LEVEL] = str(self.log_level)
        cls_spec = {"cls": "distributed.Scheduler", "opts": {**self.options, "scheduler_file": self._file}}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "distributed.cli.dask_spec", "--spec", json.dumps(cls_spec),
            stdout=self._log, stderr=self._log, env=env,
        )
        deadline = time.monotonic() + self.START_TIMEOUT
        while self.process.returncode is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, KeyError):
                with open(self._file) as f:
                    self.address = json.load(f)["address"]
                break
            await asyncio.sleep(0.05)
        else:
            log = self._read_log()
            await self.close()
            raise DgvmError(f"the dgvm.LocalCluster scheduler process did not start; its log:\n{log}")
        await super().start()

    def _read_log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    async def close(self):
        p = self.process
        if p is not None and p.returncode is None:
            # SIGTERM: the scheduler closes its comms and its plugins' state first.
            p.terminate()
            try:
                await asyncio.wait_for(p.wait(), self.STOP_TIMEOUT)
            except asyncio.TimeoutError:
                p.kill()
                await p.wait()
        if self._file is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._file)
        if self._log is not None:
            self._log.close()
            self._log = None
        await super().close()


def dask_setup(scheduler) -> None:
    """Preload of the scheduler process: close it once its parent is gone (a parent killed,
    or stopped by a signal, never closes its cluster), set its log level, and keep its
    collection pauses short (``dgvm.gc_pauses``)."""
    gc_pauses.shorten()
    level = os.environ.get(LOG_LEVEL)
    if level:
        logging.getLogger("distributed").setLevel(int(level))
    parent = int(os.environ.get(PARENT, "0"))
    if not parent:
        return

    def look():
        if os.getppid() != parent:  # re-parented: the parent has exited
            watch.stop()
            asyncio.ensure_future(scheduler.close(reason="dgvm-cluster-parent-gone"))

    watch = PeriodicCallback(look, WATCH_INTERVAL * 1000)
    watch.start()
