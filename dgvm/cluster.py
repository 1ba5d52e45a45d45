"""``dgvm.LocalCluster``: a Dask cluster on this machine with the dgvm plugins installed.

On ``cuda`` it starts one worker process per visible GPU, each pinned to its GPU through
``CUDA_VISIBLE_DEVICES`` (as dask-cuda does); on ``cpu`` it starts ``n_workers`` workers,
each with an emulated device of the capacity and relative speed given per worker.
"""

from __future__ import annotations

import os

from distributed import Nanny, Scheduler, SpecCluster, Worker

from dgvm import backends, config, deploy
from dgvm.backends.cuda import gpu_count


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


class LocalCluster(SpecCluster):
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
    """

    def __init__(
        self,
        n_workers: int | None = None,
        backend: str | None = None,
        device_memory=None,
        device_speed=None,
        threads_per_worker: int = 1,
        processes: bool = True,
        dashboard_address: str | None = ":8787",
        host: str = "127.0.0.1",
        asynchronous: bool = False,
        silence_logs=True,
        **worker_kwargs,
    ):
        config.validate({"backend": backend}, source="LocalCluster({key}=...)")
        self.backend = backends.resolve(backend or config.get("backend"))
        gpus = _visible_gpus() if self.backend == "cuda" else []
        if n_workers is None:
            n_workers = len(gpus) if gpus else 2
        if self.backend == "cuda" and n_workers > len(gpus):
            raise ValueError(f"{n_workers} cuda workers asked but {len(gpus)} GPUs are visible")
        if self.backend == "cuda" and not processes:
            raise ValueError("cuda workers need processes=True (one process per GPU)")
        memories = _per_worker(device_memory, n_workers, "device_memory")
        speeds = _per_worker(device_speed, n_workers, "device_speed")

        scheduler = {
            "cls": Scheduler,
            "options": {
                "host": host,
                "dashboard_address": dashboard_address,
                "dashboard": dashboard_address is not None,
                "preload": ["dgvm.scheduler"],
            },
        }
        if silence_logs:
            import logging

            worker_kwargs.setdefault("silence_logs", logging.WARN)
        workers = {}
        for i in range(n_workers):
            argv = ["--dgvm-backend", self.backend]
            if memories[i] is not None:
                argv += ["--dgvm-device-memory", str(config.to_bytes(memories[i]))]
            if speeds[i] is not None:
                argv += ["--dgvm-device-speed", str(float(speeds[i]))]
            options = {
                "host": host,
                "nthreads": threads_per_worker,
                "preload": ["dgvm.worker"],
                "preload_argv": argv,
                **worker_kwargs,
            }
            if self.backend == "cuda":
                # Worker i sees GPU i first, as dask-cuda arranges it.
                order = gpus[i:] + gpus[:i]
                options["env"] = {"CUDA_VISIBLE_DEVICES": ",".join(order)}
            elif processes:
                options["env"] = deploy.cpu_worker_env(n_workers)
            if not processes:
                options.pop("silence_logs", None)
            workers[f"dgvm-{i}"] = {"cls": Nanny if processes else Worker, "options": options}
        super().__init__(
            workers=workers,
            scheduler=scheduler,
            asynchronous=asynchronous,
            name="dgvm.LocalCluster",
        )

    def __repr__(self):
        return f"<dgvm.LocalCluster backend={self.backend} workers={len(self.worker_spec)} {self.scheduler_address}>"
