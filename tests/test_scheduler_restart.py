"""A scheduler that restarts: its process is killed (SIGKILL), a new one starts at the same
address, and the GVAT comes back from what the workers report (``dgvm.scheduler.rebuild``).

The scheduler (``dask scheduler --preload dgvm.scheduler``) and the workers (``dgvm worker
--nworkers N``: worker processes under nannies, cpu backend) are processes of their own on
loopback, as in ``test_deploy.py``. The program's client is the same throughout: Dask's
Client reconnects to the scheduler at the same address, with the same id, so it still owns
its allocations."""

from __future__ import annotations

import os
import re
import signal
import socket
import time

import dask
import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import drain_releases
from dgvm.client.session import call_workers
from dgvm.gvat import GVAT, restore
from dgvm.gvat.table import ID_EPOCH, IDS_PER_SECOND, first_id
from dgvm.gvat.ranges import RangeAllocator
from dgvm.protocol import messages
from dgvm.protocol.errors import ChunkLost, DgvmError, InvalidAddress
from dgvm.protocol.records import DeviceProfile
from dgvm.scheduler.plugin import meta

from test_deploy import WORKER_ENV, Processes, cli, procs  # noqa: F401  (procs: a fixture)

MiB = 2**20
# The client's reconnection lasts Dask's connect timeout (dgvm.connect-timeout): longer
# than a scheduler takes to start on a loaded machine.
RECONNECT = "120s"


# -- the bookkeeping alone (gvat.restore) --------------------------------------------------


def test_a_range_handed_out_before_is_reserved_again():
    r = RangeAllocator(1000, 10_000, 100)
    assert r.reserve(3000, 250) and r.size_of(3000) == 300
    assert not r.reserve(3200, 100) and not r.reserve(2900, 200)  # (overlaps it)
    assert r.free_below(3500) == [(1000, 2000), (3300, 200)]
    assert r.allocate(2000) == 1000 and r.allocate(100) == 3300
    r.free(3000)
    assert r.allocate(300) == 3000 and r.used_total == 2400


def _gvat(workers: int, first: int = 1) -> GVAT:
    g = GVAT(base=2**32, size=2**40, alignment=2**21, headroom=0.0, first=first)
    for i in range(workers):
        g.inventory.register(f"tcp://w{i}", DeviceProfile("cpu", "cpu", "cpu", 2**30, 1e10))
    return g


def _reports(g: GVAT) -> dict:
    """What each worker's store would report of ``g``'s allocations (every write count 0)."""
    out = {r.address: {"allocations": [], "max_alloc_id": g._next_id - 1,
                       "max_vaddr_end": max(a.vaddr + a.nbytes for a in g.allocations.values())}
           for r in g.inventory.live()}
    for a in g.allocations.values():
        held = {}
        for i, uid in enumerate(a.homes.tolist()):
            held.setdefault(g.inventory.by_uid[uid].address, ([], []))[0].append([i, a.size(i), 0])
        for i, uids in a.backups.items():
            for uid in uids:
                home = g.inventory.by_uid[int(a.homes[i])].address
                held.setdefault(g.inventory.by_uid[uid].address, ([], []))[1].append([i, a.size(i), home, 0])
        for addr, (homes, backups) in held.items():
            out[addr]["allocations"].append({"alloc_id": a.alloc_id, "owner": a.owner,
                                             "meta": meta(a, "old").to_dict(), "homes": homes, "backups": backups})
    return out


def _rebuilt(reports: dict, workers: int, skip=()) -> tuple[GVAT, restore.Restored, dict]:
    g = _gvat(workers)
    r = restore.Restored(g)
    acts = {}
    for addr, report in reports.items():
        if addr in skip:
            continue
        acts[addr] = restore.Actions()
        for entry in report["allocations"]:
            r.merge_one(g.inventory.by_address[addr], entry, acts[addr])
        g.resume_ids(report["max_alloc_id"])
        r.high = max(r.high, report["max_vaddr_end"])
    return g, r, acts


def _same(a, b) -> None:
    assert (a.alloc_id, a.owner, a.vaddr, a.nbytes, a.chunk_bytes, a.placement, a.dtype, a.shape,
            a.grid_chunks, a.copies, a.uniform) == (b.alloc_id, b.owner, b.vaddr, b.nbytes, b.chunk_bytes,
                                                   b.placement, b.dtype, b.shape, b.grid_chunks, b.copies, b.uniform)
    np.testing.assert_array_equal(a.offsets, b.offsets)


def test_a_reports_actions_that_do_not_end_hold_the_rebuild_only_for_the_reports_bound(monkeypatch):
    """A report's actions on its worker (drop stale backups, free what cannot be taken
    back) wait for that worker's store, which a task there may hold while it waits for
    the rebuilt GVAT: the rebuild waits for them at most ``REPORT_WAIT`` (then it settles
    without them), never for ever."""
    import asyncio
    import types

    from dgvm.scheduler import rebuild

    monkeypatch.setattr(rebuild, "REPORT_WAIT", 0.2)

    async def never(*args, **kwargs):
        await asyncio.Event().wait()

    plugin = types.SimpleNamespace(scheduler=types.SimpleNamespace(stream_comms={}), _ask=never, _free_on=never)
    acts = restore.Actions()
    acts.drop[1] = [0, 1]
    acts.free.append(2)

    async def act():
        await asyncio.wait_for(rebuild.Rebuild._act(types.SimpleNamespace(plugin=plugin), "tcp://w:1", acts), 30)

    asyncio.run(act())


def test_the_table_is_put_back_from_the_reports():
    g = _gvat(3)
    first = g.allocate("c1", np.full(7, 4 << 20), placement="round_robin")
    g.free(g.allocate("c1", np.full(2, 1 << 20)).alloc_id)  # freed: its id and range stay unused
    grid = ((3, 3, 1), (5, 2))
    arr = g.allocate("c2", [3 * 5 * 8, 3 * 2 * 8, 3 * 5 * 8, 3 * 2 * 8, 5 * 8, 2 * 8], dtype="<f8",
                     shape=(7, 7), grid_chunks=grid, copies=2)
    reports = _reports(g)
    reports["tcp://w0"]["max_alloc_id"] = 5  # (a store saw a later id, since freed)

    h, r, acts = _rebuilt(reports, 3)
    assert not any(acts.values()) and r.lost() == {}
    assert sorted(h.allocations) == [first.alloc_id, arr.alloc_id]
    for a in (first, arr):
        b = h.allocations[a.alloc_id]
        _same(a, b)
        assert [h.inventory.by_uid[u].address for u in b.homes.tolist()] == \
            [g.inventory.by_uid[u].address for u in a.homes.tolist()]
    assert {i: {h.inventory.by_uid[u].address for u in us} for i, us in h.allocations[arr.alloc_id].backups.items()} == \
        {i: {g.inventory.by_uid[u].address for u in us} for i, us in arr.backups.items()}
    assert r.stale_backups() == {}
    booked = {rec.address: rec.used for rec in g.inventory.live()}
    assert {rec.address: rec.used for rec in h.inventory.live()} == booked
    assert h.translate(arr.vaddr + 100).alloc_id == arr.alloc_id

    # New allocations: ids and ranges past anything handed out before the restart.
    r.retire()
    new = h.allocate("c1", np.full(2, 1 << 20))
    assert new.alloc_id == 6 and new.vaddr >= arr.vaddr + arr.nbytes
    for alloc_id in list(h.allocations):  # those put back are freed as any other
        h.free(alloc_id)
    assert all(rec.used == 0 and rec.chunks == 0 for rec in h.inventory.by_uid.values())
    assert h.space.used_total == sum(r.retired.values())


def test_a_chunk_no_worker_reports_is_lost_and_a_second_home_is_released():
    g = _gvat(3)
    a = g.allocate("c1", np.full(6, 1 << 20), placement="round_robin")
    reports = _reports(g)
    # w2 never came back; w1 also holds chunk 0 as a home (a move the crash cut short)
    reports["tcp://w1"]["allocations"][0]["homes"].insert(0, [0, 1 << 20, 3])
    h, r, acts = _rebuilt(reports, 3, skip={"tcp://w2"})
    assert r.lost() == {a.alloc_id: [2, 5]}
    assert acts["tcp://w1"].release == {a.alloc_id: [0]}
    m = h.chunk_map(h.allocations[a.alloc_id])
    assert [m.tiers[k] for k in m.home] == ["device", "device", "lost", "device", "device", "lost"]
    assert restore.UNREPORTED in m.workers
    h.free(a.alloc_id)  # what survived goes; nothing stays booked
    assert all(rec.used == 0 and rec.chunks == 0 for rec in h.inventory.by_uid.values())


def test_backups_that_missed_a_write_are_dropped_and_chunks_without_meta_freed():
    g = _gvat(3)
    a = g.allocate("c1", np.full(3, 1 << 20), placement="round_robin", copies=2)
    reports = _reports(g)
    for entry in (e for rep in reports.values() for e in rep["allocations"]):
        entry["homes"] = [[i, n, 2] for i, n, _ in entry["homes"]]  # two writes at every home
        entry["backups"] = [[i, n, home, 2 if i != 1 else 1] for i, n, home, _ in entry["backups"]]
    reports["tcp://w0"]["allocations"].append(
        {"alloc_id": 9, "owner": "c1", "meta": None, "homes": [[0, 10, 0]], "backups": []})
    h, r, _ = _rebuilt(reports, 3)
    holder = g.inventory.by_uid[next(iter(a.backups[1]))].address
    assert r.stale_backups() == {holder: {a.alloc_id: [1]}}  # chunk 1's copy missed a write
    assert sorted(h.allocations[a.alloc_id].backups) == [0, 2]
    assert r.orphans_to_free() == {"tcp://w0": [9]}
    assert h._next_id == 10  # (the orphan's id stays unused too: it was reported)


def test_what_a_restarted_gvat_hands_out_before_the_reports_never_names_an_earlier_allocation():
    # The earlier GVAT lived one second and handed out as many ids as the clock allows.
    t0 = ID_EPOCH + 1_000_000.0
    g = _gvat(2, first=first_id(t0))
    g._next_id += IDS_PER_SECOND - 2
    a = g.allocate("c1", np.full(2, 1 << 20))
    freed = g.allocate("c1", np.full(1, 1 << 20))
    g.free(freed.alloc_id)
    reports = _reports(g)
    # The restarted one hands out an id and a range before any worker reported.
    h = _gvat(2, first=first_id(t0 + 1.0))
    b = h.allocate("c1", np.full(2, 1 << 20))
    assert b.alloc_id > freed.alloc_id and b.vaddr == a.vaddr
    r = restore.Restored(h)
    acts = restore.Actions()
    for entry in reports["tcp://w0"]["allocations"]:
        r.merge_one(h.inventory.by_address["tcp://w0"], entry, acts)
    assert acts.free == [a.alloc_id]  # its chunks go; the new allocation's stay
    assert h.allocations[b.alloc_id].owner == "c1"
    with pytest.raises(InvalidAddress, match=rf"allocation {a.alloc_id} was made before the scheduler "
                       rf"restarted .* went to allocation {b.alloc_id}"):
        h.get(a.alloc_id, "c1")
    with pytest.raises(InvalidAddress, match=rf"no allocation with id {freed.alloc_id}: not one this "
                       "scheduler made, nor one the workers reported after a restart"):
        h.get(freed.alloc_id, "c1")
    h.free(b.alloc_id)
    with pytest.raises(InvalidAddress, match=rf"allocation {b.alloc_id} was already freed"):
        h.get(b.alloc_id, "c1")


def test_chunks_reported_before_their_meta_are_put_back_with_it():
    g = _gvat(2)
    a = g.allocate("c1", np.full(4, 1 << 20), placement="round_robin")
    reports = _reports(g)
    w0, = reports["tcp://w0"]["allocations"]
    w0["meta"] = None  # (this worker cannot tell where the allocation lives)
    w0["homes"].append([1, 5, 0])  # and a copy of w1's chunk 1, of the wrong size
    h, r, acts = _rebuilt({"tcp://w0": reports["tcp://w0"]}, 2)
    assert not h.allocations and list(r.orphans) == [a.alloc_id]
    mine = restore.Actions()
    for entry in restore.parts(reports["tcp://w1"]["allocations"][0], 1):  # (one chunk at a time)
        r.merge_one(h.inventory.by_address["tcp://w1"], entry, mine)
    assert r.lost() == {} and not mine
    assert {k: (v.release, v.drop, v.free) for k, v in r.take_deferred().items()} == \
        {"tcp://w0": ({a.alloc_id: [1]}, {}, [])}
    np.testing.assert_array_equal(h.allocations[a.alloc_id].homes, a.homes)


def test_a_worker_back_to_a_scheduler_that_lived_on_gives_up_what_it_held():
    g = _gvat(2)
    a = g.allocate("c1", np.full(4, 1 << 20), placement="round_robin", copies=2)
    b = g.allocate("c1", np.full(2, 1 << 20))
    report = _reports(g)["tcp://w1"]
    report["allocations"].append({"alloc_id": 77, "owner": "c1", "meta": None, "homes": [[0, 9, 0]], "backups": []})
    g.inventory.remove("tcp://w1")
    back = g.inventory.register("tcp://w1", DeviceProfile("cpu", "cpu", "cpu", 2**30, 1e10))
    g.allocations[a.alloc_id].homes[3] = back.uid  # (a move there since it came back)
    acts = restore.leftovers(g, back, report)
    assert acts.release == {a.alloc_id: [1], b.alloc_id: [1]}
    assert acts.drop == {a.alloc_id: [0, 2]} and acts.free == [77]


# -- a worker process, a scheduler that lives on ----------------------------------------------


def test_a_worker_whose_scheduler_stream_broke_comes_back_without_its_chunks(case):
    """The scheduler took it for gone (its chunks lost, or copies took over): it registers
    again holding them, and gives them up; nothing is left behind."""
    case.needs_workers(2, "a copy of y's chunks on another worker")
    client = case.client
    hx = np.arange(6_000, dtype=np.int64)
    x = dnp.from_numpy(hx, chunks=1_000, placement="round_robin", client=client)
    y = dnp.from_numpy(hx + 1, chunks=1_000, placement="round_robin", replicas=2, client=client)
    victim = x.alloc.homes()[0]
    lost = [i for i, w in enumerate(x.alloc.homes()) if w == victim]
    # (The answer may be lost with the stream it breaks: a worker process breaks it at once.)
    client.run(lambda dask_worker: dask_worker.batched_stream.comm.abort(), workers=[victim], on_error="ignore")
    wait_for("the worker back, holding no chunk", lambda: victim in {w.address for w in dgvm.workers(client=client)}
             and case.store_chunks()[victim] == 0, None, timeout=60)
    with pytest.raises(ChunkLost, match=re.escape(f"chunks {lost} of allocation {x.alloc.alloc_id}")):
        dnp.asnumpy(x)
    np.testing.assert_array_equal(dnp.asnumpy(y), hx + 1)
    x.free()
    y.free()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_scheduler(procs: Processes, name: str, port: int, env: dict | None = None) -> str:
    procs.start(name, [
        *cli("dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
        "--dashboard-address", "127.0.0.1:0", "--preload", "dgvm.scheduler",
    ], env=env)
    return f"tcp://127.0.0.1:{port}"


def kill(procs: Processes, name: str) -> None:
    """SIGKILL, as a crash: the scheduler closes nothing."""
    p = procs.procs[name]
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    procs.outcome[name] = "killed on purpose"


def start_workers(procs: Processes, address: str, n: int, env: dict | None = None) -> None:
    procs.start("workers", [
        *cli("dgvm"), "worker", address, "--backend", "cpu", "--device-memory", "32MiB",
        "--nworkers", str(n), "--nthreads", "1", "--host", "127.0.0.1",
    ], env={**WORKER_ENV, **(env or {})})


def stores_up(client, n: int) -> bool:
    """``n`` chunk stores registered, and every nanny done registering: a nanny whose
    scheduler dies while it says its worker started exits with the worker, which would not
    outlive the scheduler then."""
    return len(dgvm.workers(client=client)) == n and not client.run_on_scheduler(
        lambda dask_scheduler: bool(dask_scheduler._starting_nannies))  # (a lambda travels by value)


def wait_for(what: str, check, procs: Processes, timeout: float = 120):
    """``check()``'s first true answer (errors while the scheduler is away count as none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer = check()
        except (OSError, DgvmError, TimeoutError):
            answer = None
        if answer:
            return answer
        time.sleep(0.25)
    pytest.fail(f"{what}: not within {timeout} s\n{procs.logs() if procs is not None else ''}")


def store_use(client, addresses) -> dict:
    stores = call_workers(messages.STORE_INFO, {a: {} for a in addresses}, client)
    return {a: (m["used"], m["chunks"], m["replicas"], m["allocations"]) for a, m in stores.items()}


def rows(client) -> dict:
    """The GVAT's table, without what a restart may change (versions)."""
    out = {}
    for info in dgvm.table(client=client, chunks=True):
        chunks = tuple((c.index, c.vaddr, c.nbytes, c.worker, c.tier, tuple(sorted(c.backups)))
                       for c in info.chunks)
        out[info.alloc_id] = (info.owner, info.vaddr, info.nbytes, info.chunk_bytes, info.nchunks,
                              info.placement, info.dtype, info.shape, info.copies, chunks)
    return out


def restart_scheduler(procs: Processes, port: int, client, workers: int, name: str = "scheduler-2") -> None:
    kill(procs, "scheduler")
    start_scheduler(procs, name, port)
    wait_for("the workers registered with the new scheduler",
             lambda: len(dgvm.workers(client=client)) == workers and client.status == "running", procs)


@pytest.mark.slow
def test_the_gvat_comes_back_from_the_workers(procs):
    port = free_port()
    address = start_scheduler(procs, "scheduler", port)
    start_workers(procs, address, 3)
    with dask.config.set({"dgvm.connect-timeout": RECONNECT}):
        client = dgvm.connect(address)
    with client:
        wait_for("3 chunk stores", lambda: stores_up(client, 3), procs)
        workers = {w.address for w in dgvm.workers(client=client)}
        pids = client.run(os.getpid)
        hx = np.arange(30_000, dtype=np.float64).reshape(300, 100)
        hy = np.linspace(-1, 1, 12_000, dtype=np.float32)
        x = dnp.from_numpy(hx, chunks=(40, 60), client=client)  # uneven blocks
        y = dnp.from_numpy(hy, chunks=1_000, replicas=2, client=client)  # backups
        buf = dgvm.malloc(3 * MiB + 5, chunk_bytes=MiB, client=client)
        hb = np.random.default_rng(0).integers(0, 255, 3 * MiB + 5, dtype=np.uint8)
        buf.write(0, hb)
        before = rows(client)
        assert {c[3] for row in before.values() for c in row[-1]} == workers

        restart_scheduler(procs, port, client, 3)

        # The same worker processes, holding what they held; the same table.
        assert client.run(os.getpid) == pids
        assert rows(client) == before
        np.testing.assert_array_equal(dnp.asnumpy(x), hx)
        np.testing.assert_array_equal(dnp.asnumpy(y), hy)
        np.testing.assert_array_equal(buf.read(0, hb.size), hb)

        # Writes, operations and launches, as before the restart.
        x[10:50, 5:95] = -1.0
        hx[10:50, 5:95] = -1.0
        y[:3_000] = y[:3_000] * 2
        hy[:3_000] *= 2
        buf.write(MiB - 3, np.full(7, 9, np.uint8))
        hb[MiB - 3:MiB + 4] = 9
        np.testing.assert_array_equal(dnp.asnumpy(x), hx)
        np.testing.assert_array_equal(dnp.asnumpy(y), hy)
        np.testing.assert_array_equal(buf.read(0, hb.size), hb)
        np.testing.assert_allclose(float(dnp.sum(x * 2)), float(np.sum(hx * 2)))
        backups = {c.index: c.backups for c in dgvm.table(y.alloc.alloc_id, client=client, chunks=True)[0].chunks}
        assert all(len(b) == 1 for b in backups.values())  # every write reached the backups

        # New memory gets ids and addresses no allocation before the restart had.
        z = dnp.from_numpy(np.arange(5_000, dtype=np.int64), chunks=1_000, client=client)
        np.testing.assert_array_equal(dnp.asnumpy(z + x[0, 0]), np.arange(5_000) + hx[0, 0])
        assert z.alloc.alloc_id > max(before)
        new_vaddr = rows(client)[z.alloc.alloc_id][1]
        assert new_vaddr >= max(r[1] + r[2] for r in before.values())

        for a in (x, y, z, buf):
            a.free()
        drain_releases(client)  # (temporaries: ``y[:3_000] * 2``, ``x * 2``)
        assert dgvm.table(client=client) == []
        use = store_use(client, workers)
        assert all(u == (0, 0, 0, 0) for u in use.values()), use
        client.close()
    assert "killed" not in procs.stop().values()


@pytest.mark.slow
def test_chunks_no_worker_reports_are_lost(procs):
    """A worker dies while the scheduler is away: the allocations it held chunks of (no
    copies) raise ChunkLost naming them; one kept with replicas=2 lives on; frees release
    every chunk that survived. What a client that does not come back owned is freed."""
    port = free_port()
    address = start_scheduler(procs, "scheduler", port)
    start_workers(procs, address, 3)
    with dask.config.set({"dgvm.connect-timeout": RECONNECT}):
        client = dgvm.connect(address)
        other = dgvm.connect(address)
    with client:
        wait_for("3 chunk stores", lambda: stores_up(client, 3), procs)
        hx = np.arange(9_000, dtype=np.int32)
        x = dnp.from_numpy(hx, chunks=1_000, placement="round_robin", client=client)
        y = dnp.from_numpy(hx * 3, chunks=1_000, placement="round_robin", replicas=2, client=client)
        orphan = dnp.from_numpy(hx, chunks=3_000, client=other)
        pids = client.run(os.getpid)
        victim = sorted(pids)[0]
        lost = [i for i, w in enumerate(x.alloc.homes()) if w == victim]

        kill(procs, "scheduler")
        os.kill(pids[victim], signal.SIGKILL)  # its nanny starts a new, empty worker
        t0 = time.monotonic()
        other.close()  # (a program that ends while the scheduler is away)
        assert time.monotonic() - t0 < 30
        start_scheduler(procs, "scheduler-2", port, env={"DASK_DGVM__SCHEDULER_WAIT": "5s"})
        wait_for("3 workers again", lambda: len(dgvm.workers(client=client)) == 3
                 and victim not in {w.address for w in dgvm.workers(client=client)}, procs)

        with pytest.raises(ChunkLost, match=re.escape(f"chunks {lost} of allocation {x.alloc.alloc_id}")):
            dnp.asnumpy(x)
        np.testing.assert_array_equal(dnp.asnumpy(y), hx * 3)
        y[:] = 7
        np.testing.assert_array_equal(dnp.asnumpy(y), np.full(9_000, 7, np.int32))
        x.free()
        y.free()
        drain_releases(client)
        # (its chunks stay in the stores unless it is put back, then freed)
        wait_for("what the client that did not come back owned freed",
                 lambda: dgvm.table(client=client) == [], procs, timeout=60)
        workers = [w.address for w in dgvm.workers(client=client)]
        use = store_use(client, workers)
        assert all(u == (0, 0, 0, 0) for u in use.values()), use
        client.close()


@pytest.mark.slow
def test_workers_close_when_no_scheduler_comes_back(procs):
    port = free_port()
    address = start_scheduler(procs, "scheduler", port)
    start_workers(procs, address, 1, env={"DASK_DGVM__SCHEDULER_WAIT": "3s"})
    with dask.config.set({"dgvm.connect-timeout": RECONNECT}), dgvm.connect(address) as client:
        wait_for("a chunk store", lambda: stores_up(client, 1), procs)
    kill(procs, "scheduler")
    t0 = time.monotonic()
    procs.wait_exit("workers", 60)
    assert time.monotonic() - t0 > 3
    assert "no scheduler came back" in procs.log("workers")
