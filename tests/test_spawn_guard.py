"""A program without an ``if __name__ == "__main__":`` guard is not run again by the
processes of the cluster its first operation starts: not at their start, and not when a
nanny restarts its worker (dgvm.deploy.spawn_guard)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Appends the name it runs under to a file each time it runs, in any process.
RECORD = (
    "import os\n"
    "with open(os.environ['RUNS'], 'a') as f:\n"
    "    f.write(__name__ + '\\n')\n"
)

RESTART = RECORD + """
if __name__ == "__main__":
    import sys
    import dgvm
    from dgvm.deploy.spawn_guard import ProgramNotRerunNanny, program_not_rerun

    nanny = {"guarded": {"worker_class": ProgramNotRerunNanny}, "plain": {}}[sys.argv[1]]
    with program_not_rerun():  # the start is covered either way
        client = dgvm.connect(backend="cpu", n_workers=1, processes=True, device_memory="64MiB",
                              dashboard_address=None, **nanny)
    [worker] = client.scheduler_info()["workers"]
    client.restart_workers([worker])  # the nanny spawns a new worker process
    print(client.submit(lambda: 40 + 2, pure=False).result())
    client.close()
"""


def _run(tmp_path, text, *args, **env):
    script, runs = tmp_path / "prog.py", tmp_path / "runs.txt"
    script.write_text(text)
    out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "RUNS": str(runs), "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error",
                              **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines(), runs.read_text().split()


@pytest.mark.parametrize("nanny", ["guarded", "plain"])
def test_a_restarted_worker_does_not_run_the_program_again(tmp_path, nanny):
    stdout, runs = _run(tmp_path, RESTART, nanny)
    assert stdout[-1] == "42"
    if nanny == "guarded":
        assert runs == ["__main__"]
    else:  # what the guard prevents: Dask's own nanny runs the script in its new worker
        assert runs == ["__main__", "__mp_main__"]


@pytest.mark.gpu
def test_an_unguarded_numpy_program_runs_once_on_gpus(tmp_path):
    """The implicit GPU cluster: worker processes, a scheduler process, a restart."""
    stdout, runs = _run(tmp_path, RECORD + (
        "import dgvm.array as np\n"
        "from distributed import default_client\n"
        "x = np.arange(10.0)\n"
        "print(float((x * 2).sum()))\n"
        "client = default_client()\n"
        "client.restart_workers(list(client.scheduler_info()['workers']))\n"
        "print(float((np.arange(10.0) * 3).sum()))\n"
    ))
    assert stdout[-2:] == ["90.0", "135.0"]
    assert runs == ["__main__"]
