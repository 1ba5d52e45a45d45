"""Starting dgvm with Dask's own command line: what ``dgvm scheduler`` and ``dgvm worker`` run.

Both are thin: they check the configuration, then replace themselves with Dask's CLI
(``python -m dask scheduler|worker``, or ``dask cuda worker`` for GPU hosts) with the dgvm
preloads and a few defaults added, so that everything else behaves exactly as Dask does.
Extra arguments go to Dask unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

from dgvm import config
from dgvm.backends.cuda import gpu_count
from dgvm.dashboard import urls
from dgvm.protocol.errors import DgvmError

SCHEDULER_PORT = 8786
DASHBOARD_ADDRESS = ":8787"
WORKER_PRELOAD = "dgvm.worker"
SCHEDULER_PRELOAD = "dgvm.scheduler"


def preload_argv(settings: dict) -> list[str]:
    """The worker preload's options for the settings given (``{"device-memory": "4GiB"}``
    -> ``["--dgvm-device-memory", "4GiB"]``; None: not given)."""
    argv = []
    for key, value in settings.items():
        if value is not None:
            argv += [f"--dgvm-{key}", str(value)]
    return argv


@dataclass
class Command:
    """A command line to run, the environment variables it adds, and notes for the user."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.argv)

    def exec(self) -> None:
        """Become this command (same process id, so signals reach Dask directly)."""
        env = {**os.environ, **self.env}
        sys.stdout.flush()
        sys.stderr.flush()
        if os.name == "nt":  # no exec that keeps the process on Windows
            sys.exit(subprocess.call(self.argv, env=env))
        os.execve(self.argv[0], self.argv, env)


def cpu_worker_env(nworkers: int) -> dict[str, str]:
    """Environment of ``nworkers`` cpu worker processes on this host: cpu kernels run
    parallel over Numba's threads, so the cores are shared among the workers rather than
    oversubscribed (a NUMBA_NUM_THREADS already set is left as it is)."""
    if "NUMBA_NUM_THREADS" in os.environ:
        return {}
    return {"NUMBA_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nworkers))}


def dask_cli() -> list[str]:
    """Dask's CLI in this interpreter (so the workers import this very dgvm)."""
    return [sys.executable, "-m", "dask"]


def has_dask_cuda() -> bool:
    return importlib.util.find_spec("dask_cuda") is not None


def scheduler_command(port=SCHEDULER_PORT, dashboard_address=DASHBOARD_ADDRESS, dask_args=()) -> Command:
    """``dask scheduler`` with the GVAT preload."""
    config.validate()
    argv = [*dask_cli(), "scheduler", *dask_args, "--preload", SCHEDULER_PRELOAD, "--port", str(port)]
    if dashboard_address is not None:
        argv += ["--dashboard-address", str(dashboard_address)]
    return Command(argv, notes=[f"dgvm on the dashboard: {dashboard_urls()}"])


def dashboard_urls() -> str:
    """dgvm's pages and JSON API on the scheduler's dashboard, as dgvm.dashboard lists them."""
    json_urls = ["/" + urls.API_PREFIX + name for name in urls.API_RESOURCES]
    return f"pages {', '.join(urls.PAGES)}; JSON {', '.join(json_urls)}; Prometheus /metrics"


def worker_command(
    dask_args=(),
    backend: str | None = None,
    device_memory: str | None = None,
    device_speed: float | None = None,
    nworkers: int | None = None,
    nthreads: int | None = None,
    gpus: int | None = None,
) -> Command:
    """``dask worker`` (cpu) or ``dask cuda worker`` (one worker per GPU) with the chunk
    store preload. ``dask_args`` (the scheduler's address among them, or
    ``--scheduler-file``) come first: Dask's CLI takes its first positional argument as the
    address and the preload's options after it. ``gpus``: visible GPUs (counted when None)."""
    # The flags as given (None: not given), so that a bad dgvm.backend is blamed on where
    # it was set rather than on --backend.
    config.validate(
        {"backend": backend, "device-memory": device_memory, "device-speed": device_speed},
        source="dgvm worker --{key}",
    )
    backend = backend or config.get("backend")
    notes = []
    if backend in ("auto", "cuda"):
        if gpus is None:
            gpus = gpu_count()
        dask_cuda = has_dask_cuda()
        if backend == "cuda" and gpus == 0:
            raise DgvmError("dgvm worker --backend cuda: no CUDA GPU is visible (CuPy sees 0 devices)")
        if backend == "cuda" and not dask_cuda:
            raise DgvmError(
                "dgvm worker --backend cuda starts one worker per GPU with dask-cuda, which is "
                "not installed: pip install 'dgvm[cuda]' (or use --backend cpu)"
            )
        if backend == "auto":
            if gpus and not dask_cuda:
                notes.append(f"{gpus} GPU(s) visible but dask-cuda is not installed: starting cpu "
                             "workers (pip install 'dgvm[cuda]' for one worker per GPU)")
            backend = "cuda" if gpus and dask_cuda else "cpu"
    settings = {"backend": backend, "device-memory": device_memory, "device-speed": device_speed}
    settings = {k: str(v) for k, v in settings.items() if v is not None}
    preload = ["--preload", WORKER_PRELOAD]
    dask_args = list(dask_args)
    if backend == "cuda":
        if nworkers is not None:
            raise DgvmError(
                "on cuda, dgvm worker starts one worker per visible GPU: choose the GPUs with "
                "CUDA_VISIBLE_DEVICES instead of --nworkers"
            )
        argv = [*dask_cli(), "cuda", "worker", *dask_args]
        if nthreads is not None:
            argv += ["--nthreads", str(nthreads)]
        # dask cuda worker hands one argument list to every preload, and its own
        # (dask_cuda.initialize) rejects --dgvm-* options: the settings travel as the
        # DASK_DGVM__* variables instead, which every worker process reads.
        env = {config.env_var(key): value for key, value in settings.items()}
        notes.append(f"one worker per GPU ({gpus} visible), cuda backend")
    else:
        n = nworkers or 1
        argv = [*dask_cli(), "worker", *dask_args, "--nworkers", str(n), "--nthreads", str(nthreads or 1)]
        preload += preload_argv(settings)
        env = cpu_worker_env(n)
        memory = device_memory or config.get("device-memory") or config.get("cpu-default-memory")
        notes.append(f"{n} cpu worker(s), {memory} of emulated device memory each")
    return Command(argv + preload, env=env, notes=notes)


