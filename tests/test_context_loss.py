"""A kernel whose fault ends its worker's device context (on ``cuda``: an illegal address)
is a ``KernelError``; the worker restarts (its nanny starts a new process), its chunks are
handled as those of a worker that dies (copies take over; chunks without copies are
``ChunkLost``), the faulting task is not run again elsewhere, and the cluster goes on.

On ``cpu`` no kernel can end a context (bounds are checked): the test makes one worker's
backend say its context ended after a kernel's ``IndexError``, which runs the same path
from there on. On ``cuda`` (``-m gpu``, 2 GPUs) the kernel writes 800 GB past its chunk."""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as da
from dgvm.protocol.errors import ChunkLost, KernelError
from killing import process_cluster, until, workers

BOUND = 60.0  # seconds for the restart: a new worker process imports dgvm and opens its device
FAR = 10**11  # elements past the chunk: unmapped on any GPU


@dgvm.kernel
def write_far(trigger, x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1.0
        if trigger[i] > 0:
            out[i + FAR] = 1.0


def _context_ends_on_error(dask_worker):
    """Make this cpu worker's backend say a fault ended its device context."""
    backend = dask_worker.extensions["dgvm"].backend
    backend.may_lose_context = True
    backend.context_lost = lambda: True


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_fault_that_ends_the_device_context_restarts_the_worker(backend):
    if backend == "cuda":
        from dgvm.backends.cuda import gpu_count

        if gpu_count() < 2:
            pytest.skip("needs 2 GPUs")
    with process_cluster(backend, n_workers=3) as client:
        n, chunk = 40_000, 5_000
        ref = np.arange(n, dtype=np.float64)
        x = da.from_numpy(ref, chunks=chunk, replicas=2, client=client)
        plain = da.from_numpy(ref * 3, chunks=chunk, placement="round_robin", client=client)
        out = da.zeros(n, chunks=chunk, client=client, replicas=2)
        victim = out.alloc.homes()[0]
        trigger = np.zeros(n)
        trigger[0] = 1  # only output chunk 0, on the victim, faults
        trigger = da.from_numpy(trigger, chunks=chunk, client=client)
        pids = client.run(os.getpid)
        if backend == "cpu":
            client.run(_context_ends_on_error, workers=[victim])

        t0 = time.monotonic()
        with pytest.raises(KernelError, match="write_far") as failed:
            dgvm.launch(write_far, trigger, x, out=out)
            dgvm.wait(out)
        assert time.monotonic() - t0 < BOUND
        if backend == "cuda":
            assert re.search("illegal.?address", str(failed.value), re.IGNORECASE), failed.value

        # The victim's process ends and its nanny's new one joins; the others never
        # ran the faulting task (they would have ended too).
        until(lambda: victim not in workers(client), BOUND, "the scheduler removing the victim")
        until(lambda: len(workers(client)) == len(pids), BOUND, "the new worker joining")
        after = client.run(os.getpid)
        assert all(after.get(w) == pid for w, pid in pids.items() if w != victim), (pids, after)

        # Copies took over: nothing lost where there was one; the launch's output is as
        # before it on the chunk that faulted.
        np.testing.assert_array_equal(da.asnumpy(x), ref)
        assert da.asnumpy(out)[0] == 0.0
        if victim in plain.alloc.homes():
            with pytest.raises(ChunkLost, match=victim):
                da.asnumpy(plain)
        else:
            np.testing.assert_array_equal(da.asnumpy(plain), ref * 3)
        # The cluster goes on, on every worker, the new one included.
        y = da.from_numpy(ref, chunks=chunk, placement="round_robin", client=client)
        z = da.empty_like(y)
        trigger2 = da.zeros(n, chunks=chunk, client=client)
        dgvm.launch(write_far, trigger2, y, out=z)
        np.testing.assert_array_equal(da.asnumpy(z), ref + 1)
        x1 = x + 1
        np.testing.assert_array_equal(da.asnumpy(x1), ref + 1)
        for a in (x, plain, out, trigger, y, z, trigger2, x1):
            a.free()
        assert dgvm.table(client=client) == []
        used = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.used)
        assert set(used.values()) == {0}, used
