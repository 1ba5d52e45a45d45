"""Lineage: a dgvm.array result that lost chunks with a killed worker is made again from
the operations that made it, as far back as their inputs survive, and every use answers
as NumPy does; an array written after it was made, or made from host data, raises
``ChunkLost`` naming it.

Workers in processes of their own (their nannies start a new one after each kill), one
cluster for the module; after each test the GVAT holds no allocation of this client and
the stores no bytes."""

import os
import re
import signal

import numpy as np
import pytest
from numba import cuda

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import drain_releases
from dgvm.array._engine import lineage
from dgvm.array._engine.lineage import departures_of
from dgvm.client.apply import map_chunks
from killing import process_cluster, until, workers

BOUND = 30.0
N, CHUNK = 4000, 500


@dgvm.kernel
def add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


@pytest.fixture(scope="module")
def client():
    with process_cluster(n_workers=4) as client:
        yield client


@pytest.fixture(autouse=True)
def nothing_left(client):
    """Each test leaves no allocation in the GVAT and no bytes in any store."""
    until(lambda: len(workers(client)) == 4, what="four workers")
    yield
    assert drain_releases(client, timeout=BOUND)
    assert dgvm.table(client=client) == []
    dgvm.stats(client=client)  # (waits for the releases of moved chunks)
    used = client.run(lambda dask_worker: dask_worker.extensions["dgvm"].backend.used)
    assert set(used.values()) == {0}, used


def kill(client, address: str, heard_by=None) -> None:
    """SIGKILL the worker at ``address``; return once the scheduler removed it and, with
    ``heard_by`` (an array), once this client heard of it (the news that makes an
    operation look for lost chunks before it runs)."""
    before = departures_of(heard_by.alloc).count if heard_by is not None else None
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    until(lambda: address not in workers(client), what=f"the scheduler removing {address}")
    if heard_by is not None:
        until(lambda: departures_of(heard_by.alloc).count > before, what="the client hearing of it")


def host(n: int = N):
    """arange(n) from the host, over every worker (host data: no lineage)."""
    x = dnp.from_numpy(np.arange(float(n)), chunks=CHUNK, placement="round_robin")
    assert len(set(x.alloc.homes())) == 4
    return x


def keep_off(x, victim: str) -> None:
    """Move every chunk of ``x`` off ``victim``: it survives the kill."""
    safe = next(w for w in x.alloc.homes() if w != victim)
    x.migrate([k for k, w in enumerate(x.alloc.homes()) if w == victim], safe)


def on(x, victim: str) -> list:
    return [k for k, w in enumerate(x.alloc.homes()) if w == victim]


def lost_names(error, x) -> bool:
    """Whether the ChunkLost ``error`` names ``x``'s allocation as one no lineage mends."""
    return re.search(rf"allocation {x.alloc.alloc_id} \(a {re.escape(str(x.shape))} {x.dtype} DArray",
                     str(error)) is not None


# -- made again ---------------------------------------------------------------------------
def test_an_elementwise_result_that_lost_chunks_is_made_again(client):
    h = np.arange(float(N))
    x = host()
    y = (x * 2 + 1).persist().wait()
    victim = y.alloc.home(1)
    keep_off(x, victim)
    lost_alloc = y.alloc.alloc_id
    kill(client, victim)
    np.testing.assert_array_equal(dnp.asnumpy(y), h * 2 + 1)
    assert y.alloc.alloc_id != lost_alloc  # a new allocation; the damaged one is freed
    assert lost_alloc not in {a.alloc_id for a in dgvm.table(client=client)}
    np.testing.assert_array_equal(dnp.asnumpy(y - x), h + 1)  # and it goes on being used


def test_a_launch_reading_a_result_that_lost_chunks_makes_it_again_first(client):
    h = np.arange(float(N))
    x = host()
    y = (x * 3).persist().wait()
    victim = y.alloc.home(1)
    keep_off(x, victim)
    out = dnp.empty_like(x)
    keep_off(out, victim)
    kill(client, victim, heard_by=y)
    dgvm.launch(add_one, y, out=out)
    np.testing.assert_array_equal(dnp.asnumpy(out), h * 3 + 1)


def test_a_reduction_over_a_recomputed_input(client):
    h = np.arange(float(N)).reshape(40, 100)
    x = dnp.from_numpy(h, chunks=(10, 100), placement="round_robin")
    y = dnp.sqrt(x + 3).persist().wait()
    victim = y.alloc.home(2)
    keep_off(x, victim)
    kill(client, victim)
    assert float(y.sum()) == pytest.approx(np.sqrt(h + 3).sum(), rel=1e-12)
    np.testing.assert_allclose(dnp.asnumpy(y.max(axis=0)), np.sqrt(h + 3).max(axis=0))
    np.testing.assert_allclose(dnp.asnumpy(dnp.mean(y * 2, axis=1)), np.mean(np.sqrt(h + 3) * 2, axis=1))


def test_a_chain_two_deep_whose_middle_result_lost_chunks(client):
    h = np.arange(float(N))
    x = host()
    b = (x * 3).persist().wait()
    c = (b - 1).persist().wait()
    victim = b.alloc.home(1)
    keep_off(x, victim)
    kill(client, victim)
    # c lost chunks too: made again from b, which is made again from x first.
    np.testing.assert_array_equal(dnp.asnumpy(c), h * 3 - 1)
    np.testing.assert_array_equal(dnp.asnumpy(b), h * 3)


def test_a_middle_result_collected_since_is_made_again_from_its_own_lineage(client):
    h = np.arange(float(N)).reshape(40, 100)
    x = dnp.from_numpy(h, chunks=(10, 100), placement="round_robin")
    b = dnp.matmul(x.T, x)  # stored (a blockwise operation), its input a view's copy
    c = dnp.sort(b * 2, axis=1).persist().wait()  # several operations and temporaries
    victim = c.alloc.home(0)
    keep_off(x, victim)
    del b  # freed: only c's record of how it was made is left
    kill(client, victim)
    np.testing.assert_allclose(dnp.asnumpy(c), np.sort((h.T @ h) * 2, axis=1))


def test_a_view_of_a_recomputed_array_reads_the_new_values(client):
    h = np.arange(float(N)).reshape(40, 100)
    x = dnp.from_numpy(h, chunks=(10, 100), placement="round_robin")
    y = (x + 0.5).persist().wait()
    v, t = y[5:35:2, ::3], y.T
    np.testing.assert_array_equal(dnp.asnumpy(dnp.sort(t, axis=0)), np.sort(h.T + 0.5, axis=0))  # t's copy, kept
    victim = y.alloc.home(1)
    keep_off(x, victim)
    kill(client, victim)
    np.testing.assert_array_equal(dnp.asnumpy(v), (h + 0.5)[5:35:2, ::3])
    np.testing.assert_array_equal(dnp.asnumpy(t @ y), (h.T + 0.5) @ (h + 0.5))
    np.testing.assert_array_equal(dnp.asnumpy(v * 2), (h + 0.5)[5:35:2, ::3] * 2)


def test_arrays_made_from_nothing_are_made_again(client):
    until(lambda: len(workers(client)) == 4, what="four workers")
    z = dnp.zeros(N, chunks=CHUNK, placement="round_robin")
    r = dnp.arange(float(N), chunks=CHUNK)
    u = dnp.random.default_rng(7).random(N, chunks=CHUNK)  # the key and counter are the op's
    drawn = dnp.asnumpy(u)
    victim = next(w for w in z.alloc.homes() if w in r.alloc.homes() and w in u.alloc.homes())
    kill(client, victim)
    np.testing.assert_array_equal(dnp.asnumpy(z), np.zeros(N))
    np.testing.assert_array_equal(dnp.asnumpy(r), np.arange(float(N)))
    np.testing.assert_array_equal(dnp.asnumpy(u), drawn)


def test_an_in_place_operation_on_a_recomputed_array_sees_its_values(client):
    h = np.arange(float(N))
    x = host()
    y = (x * 2).persist().wait()
    victim = y.alloc.home(3)
    keep_off(x, victim)
    kill(client, victim, heard_by=y)
    y += 1  # made again first, then written
    y[:10] = -1.0
    want = h * 2 + 1
    want[:10] = -1
    np.testing.assert_array_equal(dnp.asnumpy(y), want)


def test_chunks_lost_before_this_process_heard_are_made_again_when_a_task_fails(client, monkeypatch):
    """Without the news of the departure (nothing is looked for before an operation runs),
    the tasks that meet the lost chunks fail with ChunkLost, and that recovers them."""
    h = np.arange(float(N))
    x = host()
    y = (x + 2).persist().wait()
    z = y * 3  # deferred: computed after the kill, from y's lost chunks
    victim = y.alloc.home(2)
    keep_off(x, victim)
    checked = lineage.damaged
    asked = []

    def only_when_a_task_failed(a, force=False):
        asked.append(force)
        return force and checked(a, force=True)

    monkeypatch.setattr(lineage, "damaged", only_when_a_task_failed)
    kill(client, victim)
    assert float(y.sum()) == (h + 2).sum()
    np.testing.assert_array_equal(dnp.asnumpy(z), (h + 2) * 3)
    assert True in asked  # (recovered after a failure, not before)


# -- no lineage ---------------------------------------------------------------------------
def test_an_array_from_host_data_raises_chunklost_naming_it(client):
    x = host()
    victim = x.alloc.home(1)
    kill(client, victim)
    with pytest.raises(dgvm.ChunkLost, match="made from host data without replicas: no copy and no lineage") as e:
        dnp.asnumpy(x)
    assert lost_names(e.value, x) and victim in str(e.value)
    with pytest.raises(dgvm.ChunkLost) as e:
        float(x.sum())
    assert lost_names(e.value, x)


def test_a_result_of_host_data_that_lost_chunks_names_its_input(client):
    x = host()
    y = (x + 1).persist().wait()
    victim = y.alloc.home(1)  # x loses chunks there too
    kill(client, victim)
    with pytest.raises(dgvm.ChunkLost, match="made from host data") as e:
        dnp.asnumpy(y)
    assert lost_names(e.value, y) and f"allocation {x.alloc.alloc_id} " in str(e.value)


def test_a_result_whose_input_was_freed_has_no_lineage_left(client):
    x = host()
    y = (x + 1).persist().wait()
    victim = y.alloc.home(1)
    x.free()
    kill(client, victim)
    with pytest.raises(dgvm.ChunkLost, match="was freed, and that one has no lineage") as e:
        dnp.asnumpy(y)
    assert lost_names(e.value, y)


@pytest.mark.parametrize("write", ["base", "view", "in place", "map_chunks"])
def test_an_input_written_since_through_any_view_is_not_read_again(client, write):
    """``y`` was made from a view of ``x``; ``x`` is written since (through itself or
    through another view of it): ``y`` made again would read the new values, so it
    raises ChunkLost instead (``x`` has no lineage to make its old values)."""
    h = np.arange(float(N))
    x = host()
    y = (x[::2] * 2).persist().wait()
    victim = y.alloc.home(1)
    keep_off(x, victim)
    if write == "base":
        x[0:10] = -1.0
    elif write == "view":
        x[::4][:5] = -1.0
    elif write == "map_chunks":
        map_chunks(x.alloc, _fill_chunks)  # (past the array: through its allocation)
    else:
        x += 1.0
    x.wait()
    kill(client, victim)
    with pytest.raises(dgvm.ChunkLost, match="written since, and that one has no lineage") as e:
        dnp.asnumpy(y)
    assert lost_names(e.value, y)
    assert dnp.asnumpy(x)[20] == {"in place": h[20] + 1, "map_chunks": 8.0}.get(write, h[20])


def _setitem(y, x):
    y[100:200] = 5.0


def _setitem_host(y, x):
    y[...] = np.full(N, 3.0)


def _setitem_mask(y, x):
    y[y > 100] = 0.0


def _setitem_through_a_view(y, x):
    v = y[::7]
    v[...] = -2.0


def _write_through_a_derived_view(y, x):
    y.reshape(40, 100)[3] = 9.0  # a reshape's view: written back to y


def _in_place_operator(y, x):
    y *= 3


def _in_place_through_a_view(y, x):
    v = y[1::2]
    v += x[1::2]


def _launch_out(y, x):
    dgvm.launch(add_one, x, out=y)


def _launch_in_place(y, x):
    dgvm.launch(add_one, y, out=y)


def _sort_method(y, x):
    y.sort()


def _put(y, x):
    y.alloc.put([(0, 0, np.full(CHUNK, 4.0).view(np.uint8))])


def _fill_chunks(xp, chunk, index):
    chunk.view(np.float64)[:] = 8.0


def _map_chunks(y, x):
    map_chunks(y.alloc, _fill_chunks)


WRITES = [_setitem, _setitem_host, _setitem_mask, _setitem_through_a_view, _write_through_a_derived_view,
          _in_place_operator, _in_place_through_a_view, _launch_out, _launch_in_place, _sort_method,
          _put, _map_chunks]


@pytest.mark.parametrize("write", WRITES, ids=[w.__name__.strip("_") for w in WRITES])
def test_a_write_ends_lineage(client, write):
    """After a write, the array is not made again without it: its lost chunks raise."""
    x = host()
    y = (dnp.flip(x) + 1).persist().wait()  # a result with lineage, all over
    write(y, x)
    y.wait()
    expected = dnp.asnumpy(y)  # (the write happened)
    victim = y.alloc.home(1)
    keep_off(x, victim)
    kill(client, victim)
    with pytest.raises(dgvm.ChunkLost, match="written") as e:
        dnp.asnumpy(y)
    assert lost_names(e.value, y)
    # What survived is as written.
    k = next(i for i, w in enumerate(y.alloc.homes()) if w != victim)
    np.testing.assert_array_equal(dnp.asnumpy(y[k * CHUNK:(k + 1) * CHUNK]), expected[k * CHUNK:(k + 1) * CHUNK])


@pytest.mark.gpu
def test_a_result_on_a_gpu_that_died_is_made_again():
    """cuda, 2 GPUs: a result whose chunks died with a worker process is computed again
    from an input that kept copies."""
    from dgvm.backends.cuda import gpu_count

    if gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    with process_cluster("cuda") as client:
        h = np.arange(200_000.0)
        x = dnp.from_numpy(h, chunks=25_000, replicas=2, client=client)
        y = (x * 2 + 1).persist().wait()
        victim = y.alloc.home(0)
        lost_alloc = y.alloc.alloc_id
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        until(lambda: victim not in workers(client), what=f"the scheduler removing {victim}")
        np.testing.assert_array_equal(dnp.asnumpy(y), h * 2 + 1)
        assert y.alloc.alloc_id != lost_alloc
        np.testing.assert_array_equal(dnp.asnumpy(y - x), h + 1)
        del y
        x.free()
        assert drain_releases(client, timeout=BOUND)
        assert dgvm.table(client=client) == []
