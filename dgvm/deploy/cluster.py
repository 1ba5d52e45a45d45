"""``dgvm.LocalCluster``: a Dask cluster on this machine with the dgvm plugins installed.

It is Dask's own local cluster with two preloads added, so everything a Dask user knows
(``scale``, the dashboard, ``Client(cluster)``) works as usual:

- on ``cuda``, dask-cuda's ``LocalCUDACluster``: one worker process per visible GPU,
  each pinned to its GPU through ``CUDA_VISIBLE_DEVICES``;
- on ``cpu``, ``distributed.LocalCluster``: ``n_workers`` workers, each with an emulated
  device of the capacity and relative speed given for it.

``dgvm.LocalCluster(...)`` returns one of the two; both are instances of ``LocalCluster``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from abc import ABCMeta

import distributed
from distributed.core import Status

from dgvm import backends, config, dask_compat
from dgvm.backends.cuda import gpu_count
from dgvm.deploy import commands as deploy
from dgvm.deploy.commands import SCHEDULER_PRELOAD, WORKER_PRELOAD
from dgvm.deploy.scheduler_process import spec as own_process_spec
from dgvm.protocol import messages
from dgvm.protocol.errors import DgvmError


def _per_worker(value, n: int, what: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what} has {len(value)} entries for {n} workers")
        return list(value)
    return [value] * n


def _visible_gpus() -> list[str]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        return [d.strip() for d in env.split(",") if d.strip()]
    return [str(i) for i in range(gpu_count())]


def _preload_argv(backend: str, memory=None, speed=None) -> list[str]:
    return deploy.preload_argv({
        "backend": backend,
        "device-memory": None if memory is None else config.to_bytes(memory),
        "device-speed": None if speed is None else float(speed),
    })


class LocalCluster(metaclass=ABCMeta):
    """A local Dask cluster whose scheduler keeps the GVAT and whose workers hold chunks.

    Parameters
    ----------
    n_workers : number of workers (default: one per GPU on cuda, 2 on cpu)
    backend : "auto" (cuda when a GPU is visible), "cuda" or "cpu"
    device_memory : bytes of device memory each worker offers; one value or one per
        worker, e.g. ``["1GiB", "2GiB", "4GiB"]`` (cpu default: ``dgvm.cpu-default-memory``;
        cuda default: the whole GPU)
    device_speed : relative device speed per worker for placement (cpu emulation of mixed
        devices, e.g. ``[1, 2, 4]``); default: measured
    processes : workers in their own processes (True) or threads of this one (cpu only)
    scheduler_process : run the scheduler in a process of its own instead of on this
        process's event loop (``dgvm.deploy.scheduler_process``): programs that start many small
        operations no longer share one interpreter lock with it. It stops with the cluster,
        or when this process ends.

    Other keyword arguments go to the Dask cluster underneath (``LocalCUDACluster`` on
    cuda, ``distributed.LocalCluster`` on cpu), e.g. ``protocol="ucx"`` or
    ``rmm_pool_size``.
    """

    def __new__(
        cls,
        n_workers: int | None = None,
        backend: str | None = None,
        device_memory=None,
        device_speed=None,
        threads_per_worker: int = 1,
        processes: bool = True,
        scheduler_process: bool = False,
        dashboard_address: str | None = ":8787",
        host: str = "127.0.0.1",
        silence_logs=True,
        **kwargs,
    ):
        config.validate({"backend": backend}, source="LocalCluster({key}=...)")
        backend = backends.resolve(backend or config.get("backend"))
        gpus = _visible_gpus() if backend == "cuda" else []
        if n_workers is None:
            n_workers = len(gpus) if gpus else 2
        if backend == "cuda" and n_workers > len(gpus):
            raise ValueError(f"{n_workers} cuda workers asked but {len(gpus)} GPUs are visible")
        if backend == "cuda" and not processes:
            raise ValueError("cuda workers need processes=True (one process per GPU)")
        argvs = [
            _preload_argv(backend, memory, speed)
            for memory, speed in zip(
                _per_worker(device_memory, n_workers, "device_memory"),
                _per_worker(device_speed, n_workers, "device_speed"),
            )
        ]
        if silence_logs is True:
            silence_logs = logging.WARN
        if scheduler_process:  # refused before anything starts
            own_process_spec({"security": kwargs.get("security"), **(kwargs.get("scheduler_kwargs") or {})})
        common = dict(
            n_workers=n_workers, argvs=argvs, scheduler_process=scheduler_process,
            threads_per_worker=threads_per_worker,
            dashboard_address=dashboard_address, host=host, silence_logs=silence_logs, **kwargs,
        )
        if backend == "cuda":
            return CUDACluster(gpus=gpus, **common)
        return CPUCluster(processes=processes, **common)

    def __repr__(self):
        return f"<dgvm.LocalCluster backend={self.backend} workers={len(self.worker_spec)} {self.scheduler_address}>"


def _scheduler_kwargs(kwargs: dict) -> dict:
    options = dict(kwargs.pop("scheduler_kwargs", None) or {})
    options["preload"] = [*options.get("preload", []), SCHEDULER_PRELOAD]
    return options


class _DgvmCluster(dask_compat.SpecClusterHooks):
    """What both ``dgvm.LocalCluster`` classes add to their Dask cluster: each worker's
    preload arguments, and a close that frees every allocation before the workers go
    (their chunks would go with them anyway, and a worker that leaves holding chunks is
    otherwise reported as having lost them, and frees on the way reach closed stores)."""

    backend = ""
    FREE_TIMEOUT = 2  # seconds, of the few Dask gives a close at exit; then it closes anyway
    __repr__ = LocalCluster.__repr__

    def _keep(self, argvs: list, scheduler_process: bool, silence_logs) -> None:
        """What ``__init__`` was given that the Dask cluster underneath does not keep
        (before its ``__init__``, which asks for worker specs)."""
        self._argvs = argvs
        self._scheduler_process = scheduler_process
        self._log_level = silence_logs if isinstance(silence_logs, int) and silence_logs else None

    async def starting(self):
        if self._scheduler_process and self.scheduler is None:  # not yet started
            try:  # the options as Dask made them (checked on the caller's before)
                self.scheduler_spec = own_process_spec(self.scheduler_spec["options"], self._log_level)
            except Exception:
                self.status = Status.failed
                await self.close_now()  # nothing half-started left behind (its loop thread)
                raise

    async def correcting_state(self):
        # Workers need the scheduler's address: a scheduler in a process of its own has one
        # only once started (an asynchronous cluster's scale() comes here first).
        if self.scheduler is not None:
            await self.scheduler

    def keeps_lost_worker(self, name) -> bool:
        # A running nanny starts a new worker after its worker died (a kill, a crash). On a
        # loaded machine that takes longer than Dask's lost-worker timeout (15 s), and Dask
        # would close the nanny then, as its new worker registers: that worker would leave
        # with whatever was placed on it meanwhile, and the cluster would stay one short.
        worker = self.workers.get(name)
        return isinstance(worker, distributed.Nanny) and worker.status == Status.running

    def _preload_argv_of(self, i: int) -> list[str]:
        """Worker ``i``'s preload arguments (a worker beyond those asked for: defaults)."""
        return self._argvs[i] if i < len(self._argvs) else _preload_argv(self.backend)

    async def closing(self):
        if self.status == Status.running and self.scheduler_comm is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(messages.call(self.scheduler_comm, messages.FREE_ALL),
                                       self.FREE_TIMEOUT)


class CPUCluster(_DgvmCluster, distributed.LocalCluster):
    """``dgvm.LocalCluster`` on cpu: Dask's ``LocalCluster`` whose workers hold emulated
    devices (made by ``LocalCluster(backend="cpu", ...)``)."""

    backend = "cpu"

    def __init__(self, n_workers: int, argvs: list, processes: bool, scheduler_process: bool, **kwargs):
        self._keep(argvs, scheduler_process, kwargs.get("silence_logs"))
        self._processes = processes
        # TCP even for workers in threads (Dask would pick inproc): dgvm's cross-host
        # transfer path is Dask's comm, and tests of it need a real one.
        kwargs.setdefault("protocol", "tcp://")
        super().__init__(
            n_workers=0, processes=processes, name="dgvm.LocalCluster",
            scheduler_kwargs=_scheduler_kwargs(kwargs), preload=[WORKER_PRELOAD], **kwargs,
        )
        # Started with no workers so that each gets its own preload arguments from
        # new_worker_spec (as LocalCUDACluster does). Not scale(): it only schedules the
        # start, and a cluster made synchronously has its workers up (or raises) when made;
        # awaiting an asynchronous one starts them.
        while len(self.worker_spec) < n_workers:
            self.worker_spec.update(self.new_worker_spec())
        if not self.asynchronous:
            self.start_workers_now()

    def new_worker_spec(self):
        # Worker i gets the i-th device_memory / device_speed (the first free index, so a
        # worker replaced after a scale-down takes the settings of the one it replaces).
        i = next(i for i in range(len(self.worker_spec) + 1) if i not in self.worker_spec)
        spec = {**self.new_spec, "options": dict(self.new_spec["options"])}
        spec["options"]["preload_argv"] = self._preload_argv_of(i)
        if self._processes:
            spec["options"]["env"] = {**spec["options"].get("env", {}), **deploy.cpu_worker_env(len(self._argvs))}
        return {i: spec}


def _local_cuda_cluster():
    try:
        from dask_cuda import LocalCUDACluster  # optional (dgvm[cuda])
    except ImportError as e:
        raise DgvmError(
            "dgvm.LocalCluster on cuda runs dask-cuda's LocalCUDACluster, which is not "
            f"installed ({e}): pip install 'dgvm[cuda]', or pass backend='cpu'"
        ) from None
    return LocalCUDACluster


@functools.cache
def _cuda_cluster_class():
    base = _local_cuda_cluster()

    class CUDACluster(_DgvmCluster, base):
        """``dgvm.LocalCluster`` on cuda: dask-cuda's ``LocalCUDACluster`` (one worker per
        GPU) with the GVAT and chunk store preloads."""

        backend = "cuda"

        def __init__(self, n_workers: int, argvs: list, gpus: list, scheduler_process: bool, **kwargs):
            self._keep(argvs, scheduler_process, kwargs.get("silence_logs"))
            super().__init__(
                CUDA_VISIBLE_DEVICES=gpus, n_workers=n_workers, name="dgvm.LocalCluster",
                scheduler_kwargs=_scheduler_kwargs(kwargs), preload=[WORKER_PRELOAD], **kwargs,
            )

        def new_worker_spec(self):
            specs = super().new_worker_spec()
            for name, spec in specs.items():
                options = spec["options"]
                i = self.cuda_visible_devices.index(name)
                argv = self._preload_argv_of(i)
                # One argument list per preload: dask-cuda's own preload takes only its
                # --create-cuda-context, and ours only the --dgvm-* options.
                own = options.get("preload_argv") or []
                # dask-cuda's first, so that it makes the CUDA context (ours opens the device).
                options["preload"] = sorted(options["preload"], key=lambda p: p != "dask_cuda.initialize")
                options["preload_argv"] = [
                    argv if p == WORKER_PRELOAD else own if p == "dask_cuda.initialize" else []
                    for p in options["preload"]
                ]
            return specs

    LocalCluster.register(CUDACluster)
    return CUDACluster


def CUDACluster(**kwargs):
    """Build the cuda ``dgvm.LocalCluster`` (its class exists only where dask-cuda does)."""
    return _cuda_cluster_class()(**kwargs)


LocalCluster.register(CPUCluster)
