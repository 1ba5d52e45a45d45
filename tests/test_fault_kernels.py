"""Failures leave things as they were: a failed kernel's output keeps its values and stays
usable, its error is raised once, a kernel cannot reach past the chunks it was given, and
freeing an array needs no memory."""

import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import drain_releases
from dgvm.protocol.errors import ConnectionBroke


@dgvm.kernel
def fails(x, out):
    i = cuda.grid(1)
    if i < out.size:
        if x[i] == 3:
            raise ValueError("element 3 is bad")
        out[i] = x[i]


@dgvm.kernel
def add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


@dgvm.kernel
def writes_past_its_chunk(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i + 4096] = x[i]


@dgvm.kernel
def reads_far_away(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i + 10**9]


def cpu_only(case):
    if case.backend == "cuda":
        pytest.skip("GPU kernels raise only when compiled with debug=True")


def spread(h, chunks=5):
    x = dnp.from_numpy(h, chunks=chunks, placement="round_robin")
    out = dnp.from_numpy(np.full(h.shape, 7, dtype=h.dtype), chunks=chunks, colocate=x)
    return x, out


def test_a_failed_launch_leaves_its_output_as_before_and_usable(case):
    cpu_only(case)
    h = np.arange(30, dtype=np.int64)
    x, out = spread(h)
    try:
        dgvm.launch(fails, x, out=out)
        with pytest.raises(dgvm.KernelError, match="'fails' failed on chunk 0"):
            dnp.asnumpy(out)  # the read waits for the launch: its error is raised here, once
        np.testing.assert_array_equal(dnp.asnumpy(out), np.full(30, 7))  # as before, on every worker
        assert float(out.sum()) == 210.0
        dgvm.launch(add_one, x, out=out)  # another kernel into the same output
        np.testing.assert_array_equal(dnp.asnumpy(out), h + 1)
        out[:5] = -1  # a write from the caller
        np.testing.assert_array_equal(dnp.asnumpy(out)[:6], [-1, -1, -1, -1, -1, 6])
        x[3] = 100  # no bad element now: the kernel that failed runs
        dgvm.launch(fails, x, out=out)
        expect = h.copy()
        expect[3] = 100
        np.testing.assert_array_equal(dnp.asnumpy(out), expect)
    finally:
        x.free()
        out.free()


def test_the_error_of_a_failed_launch_goes_to_the_first_call_that_waits_for_it(case):
    cpu_only(case)
    x, out = spread(np.arange(30, dtype=np.int64))
    try:
        dgvm.launch(fails, x, out=out)
        with pytest.raises(dgvm.KernelError, match="'fails' failed"):
            float(out.sum())  # a reduction of the output waits for the launch
        out.wait()  # told once: nothing to raise
        assert float(out.sum()) == 210.0
        dgvm.launch(fails, x, out=out)
        with pytest.raises(dgvm.KernelError, match="'fails' failed"):
            out.wait()
        dgvm.wait(out)
        np.testing.assert_array_equal(dnp.asnumpy(out), np.full(30, 7))
    finally:
        x.free()
        out.free()


def test_work_ordered_after_a_failed_launch_does_not_run_and_says_why(case):
    # As in a NumPy program, where the statements after one that raised never run: a
    # launch queued behind the failed one on the same output fails with its error, and
    # leaves the output as it was; the next one, after the error was raised, runs.
    cpu_only(case)
    h = np.arange(30, dtype=np.int64)
    x, out = spread(h)
    try:
        dgvm.launch(fails, x, out=out)
        dgvm.launch(add_one, x, out=out)  # queued behind it
        with pytest.raises(dgvm.KernelError, match="'fails' failed"):
            out.wait()
        np.testing.assert_array_equal(dnp.asnumpy(out), np.full(30, 7))
        dgvm.launch(add_one, x, out=out)
        np.testing.assert_array_equal(dnp.asnumpy(out), h + 1)
    finally:
        x.free()
        out.free()


def test_a_result_made_from_a_failed_output_keeps_the_error_and_the_output_recovers(case):
    cpu_only(case)
    x, out = spread(np.arange(30, dtype=np.int64))
    try:
        dgvm.launch(fails, x, out=out)
        y = out + 1
        y.persist()  # computed after the failed launch: it has no values
        with pytest.raises(dgvm.KernelError, match="'fails' failed"):
            y.wait()
        with pytest.raises(dgvm.KernelError, match="'fails' failed"):
            dnp.asnumpy(y)  # every use of it says so
        np.testing.assert_array_equal(dnp.asnumpy(out), np.full(30, 7))  # the output recovered
        np.testing.assert_array_equal(dnp.asnumpy(out + 1), np.full(30, 8))
        y.free()
    finally:
        x.free()
        out.free()


@pytest.mark.parametrize("kernel", [writes_past_its_chunk, reads_far_away])
def test_a_kernel_indexing_past_its_chunks_is_a_kernel_error_and_touches_no_neighbour(case, kernel):
    cpu_only(case)
    x = dnp.from_numpy(np.arange(8192.0), chunks=4096)
    out = dnp.zeros(8192, chunks=4096, colocate=x)
    neighbour = dnp.from_numpy(np.full(8192, 5.0), chunks=4096, colocate=x)
    try:
        dgvm.launch(kernel, x, out=out)
        with pytest.raises(dgvm.KernelError, match=f"'{kernel.name}' indexed past an array it was given"):
            out.wait()
        np.testing.assert_array_equal(dnp.asnumpy(neighbour), np.full(8192, 5.0))
        np.testing.assert_array_equal(dnp.asnumpy(x), np.arange(8192.0))
        dgvm.launch(add_one, x, out=out)  # the workers are fine, and so is the output
        np.testing.assert_array_equal(dnp.asnumpy(out), np.arange(8192.0) + 1)
    finally:
        for a in (x, out, neighbour):
            a.free()


def test_free_keeps_the_values_of_results_not_yet_computed(case):
    h = np.arange(40.0)
    x = dnp.from_numpy(h, chunks=10)
    y = x * 2 + 1  # deferred: it reads x when computed
    v = x[::3] * 3  # read through a view of x
    x.free()
    with pytest.raises(dgvm.InvalidAddress, match="was freed"):
        dnp.asnumpy(x)
    np.testing.assert_array_equal(dnp.asnumpy(y), h * 2 + 1)  # as NumPy's y would hold
    np.testing.assert_array_equal(dnp.asnumpy(v), h[::3] * 3)
    y.free()
    v.free()


def test_free_needs_no_memory_on_a_full_cluster(case):
    total = sum(case.capacities)
    n = int(0.55 * total) // 8  # one such array fits the cluster, two do not
    x = dnp.full((n,), 2.0, chunks=n // 16)
    y = x + 1  # deferred: computing it needs a second array's memory
    z = x + 1
    with pytest.raises(dgvm.OutOfDeviceMemory):
        z.wait()
    del z
    x.free()  # does not compute y: no memory needed
    del y  # the last reader of x's memory: it goes back
    drain_releases()
    assert dgvm.table(client=case.client) == []
    x = dnp.full((n,), 3.0, chunks=n // 16)  # the room is back
    assert float(x[:2].sum()) == 6.0
    x.free()


@pytest.mark.parametrize("plane", ["direct", "tasks"])
def test_an_error_raised_through_a_freed_array_is_told_to_the_first(case, plane):
    """``out = fails(x)`` raises; ``b = fails(out)`` and ``c = add_one(b)`` fail behind it.
    ``b`` is freed; ``c.wait()`` raises the error: ``out``'s operation is told through the
    freed one, so ``out.wait()`` does not raise it again."""
    import gc

    import dask

    cpu_only(case)
    with dask.config.set({"dgvm.dispatch.plane": plane}):
        x, out = spread(np.arange(30, dtype=np.int64))
        b = dnp.from_numpy(np.zeros(30, dtype=np.int64), chunks=5, colocate=x)
        c = dnp.from_numpy(np.zeros(30, dtype=np.int64), chunks=5, colocate=x)
        try:
            dgvm.launch(fails, x, out=out)
            dgvm.launch(fails, out, out=b)  # staged: its readers are not its writers
            dgvm.launch(add_one, b, out=c)
            b.free()
            del b
            gc.collect()
            with pytest.raises(dgvm.KernelError, match="'fails' failed"):
                c.wait()
            out.wait()  # told already
        finally:
            for a in (x, out, c):
                a.free()


def test_a_connection_that_breaks_while_a_kernel_reads_its_inputs_is_not_a_kernel_error(case):
    """A launch reads its halo from the neighbours' chunks. A request for them whose
    connection breaks (and no news says the neighbour left) fails the launch with
    ``ConnectionBroke`` naming the kernel, chunk and worker, not a ``KernelError``: the
    kernel did not fail and the device is fine. The output keeps its values."""
    case.needs_workers(2, "a halo read from another worker")
    h = np.arange(30, dtype=np.int64)
    x, out = spread(h)
    ref = dnp.from_numpy(np.full(h.shape, 7, dtype=h.dtype), chunks=5, colocate=x)
    dgvm.launch(add_one, x, out=ref, halo=1)
    want = dnp.asnumpy(ref)
    ref.free()

    async def breaking(dask_worker, on):
        from dgvm.transfer import left_peers
        from dgvm.worker import access

        # (once per process: the cpu case's workers share these modules)
        if on and not hasattr(access, "_dgvm_kept"):
            async def broken(*args, **kwargs):
                raise ConnectionResetError("reset by peer")

            access._dgvm_kept = access.request_exports, left_peers.GRACE
            access.request_exports, left_peers.GRACE = broken, 0.1
        elif not on and hasattr(access, "_dgvm_kept"):
            access.request_exports, left_peers.GRACE = access._dgvm_kept
            del access._dgvm_kept

    case.client.run(breaking, on=True)
    try:
        dgvm.launch(add_one, x, out=out, halo=1)
        with pytest.raises(ConnectionBroke, match="add_one.*reset by peer") as e:
            out.wait()
        assert not isinstance(e.value, dgvm.KernelError)
    finally:
        case.client.run(breaking, on=False)
    np.testing.assert_array_equal(dnp.asnumpy(out), np.full(30, 7))
    dgvm.launch(add_one, x, out=out, halo=1)
    np.testing.assert_array_equal(dnp.asnumpy(out), want)
    x.free()
    out.free()
