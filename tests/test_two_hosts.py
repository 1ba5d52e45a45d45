"""Two hosts on one machine: workers in two network namespaces joined by a veth pair.

Namespace A runs the scheduler, two workers and the program; namespace B one worker. They
share the machine's /dev/shm and hostname, but not a network: a chunk between A's two
workers moves through shared memory, one between A and B over TCP (Dask's comm), as
between two machines (``dgvm.transfer.host``). Needs root and ``ip netns`` (skipped
otherwise). Run as a script (``python tests/test_two_hosts.py ADDRESS``), this file is the
program: it checks its results against NumPy and prints what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow

A_IP, B_IP = "10.77.0.1", "10.77.0.2"
PORT = 8786  # the namespace's own network: no other scheduler listens there
ADDRESS = f"tcp://{A_IP}:{PORT}"


# -- the program, run in namespace A --------------------------------------------------------

def _paths(stats: dict, address: str) -> dict[str, int]:
    """Chunks ``address`` received so far, by transfer path."""
    return {p: v["count"] for p, v in (stats["workers"][address].get("paths") or {}).items()}


def _received(before: dict, after: dict, address: str) -> dict[str, int]:
    b, a = _paths(before, address), _paths(after, address)
    return {p: a[p] - b.get(p, 0) for p in a if a[p] != b.get(p, 0)}


def program(address: str) -> dict:
    import dask

    import dgvm
    from dgvm.array._engine.lifecycle import drain_releases
    from killing import until

    with dask.config.set({"dgvm.connect-timeout": "60s"}):  # the scheduler may still be starting
        client = dgvm.connect(address)
    client.wait_for_workers(3, timeout=60)
    until(lambda: len(dgvm.workers()) == 3, 60, "three chunk stores")
    addrs = sorted(w.address for w in dgvm.workers())
    a1, a2 = (w for w in addrs if f"//{A_IP}:" in w)
    (b1,) = (w for w in addrs if f"//{B_IP}:" in w)
    out = {"a": [a1, a2], "b": b1, "moves": {}}

    # One chunk, moved around the three workers: each move is one pair's path.
    v_np = np.arange(50_000, dtype=np.float64)
    v = dgvm.array.asarray(v_np, chunks=(50_000,))
    v.migrate(0, a1)
    for src, dst, pair in ((a1, a2, "a1->a2"), (a2, b1, "a2->b1"), (b1, a1, "b1->a1"), (a1, b1, "a1->b1")):
        before = dgvm.stats()
        assert v.migrate(0, dst) == [0], pair
        after = dgvm.stats()
        out["moves"][pair] = {w: _received(before, after, w) for w in (a1, a2, b1)}
        np.testing.assert_array_equal(np.asarray(v), v_np)

    # An operation whose chunks cross: row i of blocks on worker i, x.T's block (i, j) is
    # x's block (j, i), on another worker for i != j.
    x_np = np.random.default_rng(7).standard_normal((300, 300))
    x = dgvm.array.asarray(x_np, chunks=(100, 100))
    for i, w in enumerate((a1, a2, b1)):
        x.migrate([(i, j) for j in range(3)], w)
    before = dgvm.stats()
    y = x + x.T
    np.testing.assert_array_equal(np.asarray(y), x_np + x_np.T)
    z = (x @ x.T).sum(axis=0)
    np.testing.assert_allclose(np.asarray(z), (x_np @ x_np.T).sum(axis=0), rtol=1e-12)
    after = dgvm.stats()
    out["op"] = {w: _received(before, after, w) for w in (a1, a2, b1)}
    out["total"] = {w: _paths(after, w) for w in (a1, a2, b1)}

    # Nothing left: no allocation, no byte in any store.
    del v, x, y, z
    drain_releases()
    out["allocations"] = len(dgvm.table())
    dgvm.stats()  # waits for the old homes of the moves to release their copies
    out["used"] = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.used)
    out["pids"] = client.run(os.getpid)
    client.shutdown()  # the scheduler and its workers close
    return out


# -- the test, in the root namespace --------------------------------------------------------

def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture(scope="module")
def namespaces():
    """Namespaces (A, B) joined by a veth pair, A at 10.77.0.1/24 and B at 10.77.0.2/24;
    deleted after, with whatever still runs in them."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make network namespaces")
    tag = f"{os.getpid()}"
    ns_a, ns_b, veth_a, veth_b = f"dgvmA{tag}", f"dgvmB{tag}", f"dva{tag}", f"dvb{tag}"
    try:
        _ip("netns", "add", ns_a)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"ip netns does not work here: {getattr(e, 'stderr', None) or e}")
    made = [ns_a]
    try:
        try:
            _ip("netns", "add", ns_b)
            made.append(ns_b)
            _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
            _ip("link", "set", veth_a, "netns", ns_a)
            _ip("link", "set", veth_b, "netns", ns_b)
            for ns, dev, ip in ((ns_a, veth_a, A_IP), (ns_b, veth_b, B_IP)):
                _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            pytest.skip(f"could not join two network namespaces by a veth pair: {e.stderr}")
        yield ns_a, ns_b
    finally:
        for ns in made:
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)  # takes its end of the veth pair, and so both
        _ip("link", "del", veth_a, check=False)  # one left outside by a failed setup


def _start(log, ns: str, *args) -> subprocess.Popen:
    """``dgvm ARGS`` in namespace ``ns`` (``ip netns exec`` becomes it: its pid), its
    output in the file ``log``."""
    with open(log, "w") as f:
        return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "dgvm", *args],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(procs, timeout: float) -> list:
    """Wait for ``procs`` to end, at most ``timeout`` seconds in all; kill those that do
    not. Returns the exit codes."""
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            codes.append(p.wait(10))
    return codes


def test_chunks_cross_hosts_over_tcp_and_stay_in_shared_memory_on_one(namespaces, tmp_path):
    ns_a, ns_b = namespaces
    # Arenas left by processes before this test (one killed cannot remove its own): a
    # process here may have the pid one of them had.
    before = set(os.listdir("/dev/shm"))
    logs = [tmp_path / f"{name}.log" for name in ("scheduler", "a1", "a2", "b1")]
    worker = ("worker", ADDRESS, "--backend", "cpu", "--device-memory", "32MiB", "--no-nanny")
    procs = [_start(logs[0], ns_a, "scheduler", "--host", A_IP, "--port", str(PORT), "--no-dashboard"),
             _start(logs[1], ns_a, *worker), _start(logs[2], ns_a, *worker), _start(logs[3], ns_b, *worker)]
    try:
        run = subprocess.run(["ip", "netns", "exec", ns_a, sys.executable, __file__, ADDRESS],
                             capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-6000:] + "".join(
            f"\n--- {log.name}\n{log.read_text()[-1500:]}" for log in logs)
        out = json.loads(run.stdout.strip().splitlines()[-1])
        codes = _stop(procs, 30)
    finally:
        _stop(procs, 0)
    (a1, a2), b1 = out["a"], out["b"]
    # Each move: the new home received the chunk, by the pair's path, and no one else did.
    assert out["moves"] == {
        "a1->a2": {a1: {}, a2: {"shm": 1}, b1: {}},
        "a2->b1": {a1: {}, a2: {}, b1: {"comm": 1}},
        "b1->a1": {a1: {"comm": 1}, a2: {}, b1: {}},
        "a1->b1": {a1: {}, a2: {}, b1: {"comm": 1}},
    }
    # The operations' reads: A's workers read each other's chunks through shared memory
    # and B's over TCP; B reads all it reads over TCP.
    op = out["op"]
    assert op[a1].get("shm", 0) > 0 and op[a1].get("comm", 0) > 0, op
    assert op[a2].get("shm", 0) > 0 and op[a2].get("comm", 0) > 0, op
    assert op[b1].get("comm", 0) > 0 and "shm" not in op[b1], op
    assert "shm" not in out["total"][b1] and "cuda_ipc" not in str(out["total"]), out["total"]
    # Nothing leaked: no allocation, empty stores, every process ended, no arena left.
    assert out["allocations"] == 0
    assert set(out["used"].values()) == {0}, out["used"]
    assert codes == [0, 0, 0, 0], [log.read_text()[-2000:] for log in logs]
    arenas = [f for f in set(os.listdir("/dev/shm")) - before for pid in out["pids"].values()
              if f.startswith(f"dgvm-{pid}-")]
    assert not arenas, arenas


if __name__ == "__main__":
    print(json.dumps(program(sys.argv[1])))
