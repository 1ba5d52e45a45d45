"""A ``dgvm.LocalCluster`` scheduler in a process of its own (``scheduler_process=True``).

Dask's local clusters run the scheduler on the event loop of the process that made the
cluster, so the program's thread and the scheduler share one interpreter lock. A NumPy-style
loop that starts an operation per line keeps both busy: on two GPUs, chains of elementwise
operations run back to back spent as much CPU in that one process as they took time
(``benchmarks/task_timeline.py``). In its own process the scheduler gets a core of its own.

The process runs ``distributed.Scheduler`` through Dask's ``dask spec`` entry point, with
this process's Dask configuration (the way Dask's nannies hand it to workers); its log
goes to a temporary file, shown if it fails to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time

import dask
from distributed.deploy.spec import ProcessInterface

# Scheduler options of Dask's local clusters that a process of its own cannot take (not
# JSON), and whose defaults it does not need.
_DROPPED_IF_UNSET = ("services", "service_kwargs", "security")


def spec(options: dict) -> dict:
    """The cluster's scheduler spec (``cls``: the in-process Scheduler, ``options``) for a
    scheduler in its own process. Raises ValueError for options it cannot pass there."""
    opts = {}
    for key, value in options.items():
        if key in _DROPPED_IF_UNSET and not _set(value):
            continue
        try:
            json.dumps(value)
        except TypeError:
            raise ValueError(
                f"scheduler_process=True cannot pass the scheduler option {key}={value!r} to "
                "another process; start the scheduler with `dgvm scheduler` instead"
            ) from None
        opts[key] = value
    return {"cls": SchedulerProcess, "options": {"options": opts}}


def _set(value) -> bool:
    """Is this option more than its default? (Dask passes a Security without TLS.)"""
    if hasattr(value, "require_encryption"):  # a distributed.Security
        return bool(value.require_encryption or value.tls_ca_file or value.tls_scheduler_cert)
    return bool(value)


class SchedulerProcess(ProcessInterface):
    """``distributed.Scheduler(**options)`` in a child process, for a ``SpecCluster``."""

    START_TIMEOUT = 60  # seconds
    STOP_TIMEOUT = 10

    def __init__(self, options: dict):
        super().__init__()
        self.options = options
        self.process = None
        self._log = None
        self._file = None

    async def start(self):
        fd, self._file = tempfile.mkstemp(prefix="dgvm-scheduler-", suffix=".json")
        os.close(fd)
        os.unlink(self._file)  # the scheduler writes it once it listens
        self._log = tempfile.TemporaryFile()
        env = {**os.environ, "DASK_INTERNAL_INHERIT_CONFIG": dask.config.serialize(dask.config.global_config)}
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
            raise RuntimeError(f"the dgvm.LocalCluster scheduler process did not start; its log:\n{log}")
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
