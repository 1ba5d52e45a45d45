"""The ``dgvm`` command, run as a user would run it."""

import os
import re
import signal
import subprocess
import sys
import urllib.request

import dask
import pytest
from distributed import Client

import dgvm

MiB = 2**20


def run(*args, timeout=240, env=None):
    return subprocess.run(
        [sys.executable, "-m", "dgvm", *args], capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


def test_demo_on_cpu_workers():
    out = run("demo", "--backend", "cpu", "--device-memory", "24MiB,32MiB,48MiB", "--chunk-bytes", "2MiB")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "dashboard: http" in text
    assert "16 random reads by global address: OK" in text
    assert "fill: done" in text and "check: done" in text
    # the array is larger than the largest device, and spread over all three workers
    table = text.split("where its")[1]
    assert table.count("tcp://") >= 3


def test_info_prints_gvat_and_workers():
    with dgvm.LocalCluster(n_workers=2, backend="cpu", device_memory="16MiB",
                           processes=False, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        buf = dgvm.malloc(3 * MiB, chunk_bytes=MiB, client=client)
        out = run("info", cluster.scheduler_address, "--chunks", timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        for w in dgvm.workers(client=client):
            assert w.address in out.stdout
        assert f"{buf.vaddr:#x}" in out.stdout and "3.00 MiB" in out.stdout
        assert "allocations (1)" in out.stdout
        buf.free()


def test_info_without_gvat_says_so():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        out = run("info", cluster.scheduler_address, timeout=60)
        assert out.returncode == 1 and "no dgvm GVAT" in out.stdout


def test_config_from_environment():
    code = "import dgvm, dask; print(dask.config.get('dgvm.placement.headroom'), dask.config.get('dgvm.backend'))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "DASK_DGVM__PLACEMENT__HEADROOM": "0.25"},
    )
    assert out.stdout.split() == ["0.25", "auto"]


def test_info_on_an_address_where_nothing_listens_fails_in_one_line():
    # Port 1 refuses; within dgvm.connect-timeout (1 s here) the command says so, once.
    out = run("info", "tcp://127.0.0.1:1", env={"DASK_DGVM__CONNECT_TIMEOUT": "1s"}, timeout=60)
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "tcp://127.0.0.1:1" in lines[0] and "no dgvm scheduler answered" in lines[0]


def test_connect_to_an_address_where_nothing_listens_raises_not_connected():
    with dask.config.set({"dgvm.connect-timeout": "1s"}):
        with pytest.raises(dgvm.NotConnected, match=r"tcp://127\.0\.0\.1:1 within 1 s"):
            dgvm.connect("tcp://127.0.0.1:1")


def test_demo_keep_serves_its_dashboard_until_ctrl_c():
    proc = subprocess.Popen(
        [sys.executable, "-m", "dgvm", "demo", "--backend", "cpu", "--device-memory", "24MiB,32MiB",
         "--chunk-bytes", "2MiB", "--keep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:  # until the demo says it waits
            lines.append(line)
            if "until Ctrl-C" in line:
                break
        link = re.search(r"(http://\S+)", lines[-1]).group(1)
        # The dashboard answers while the demo waits, with dgvm's page in it.
        page = urllib.request.urlopen(link.replace("/status", "/individual-dgvm"), timeout=30).read()
        assert b"dgvm" in page
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(lines) + out + err
    assert "closing the cluster" in out
