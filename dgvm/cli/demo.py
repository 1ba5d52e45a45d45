"""``dgvm demo``: the whole system in one run, on GPUs if present, else on cpu workers."""

from __future__ import annotations

import signal
import time

import click
import numpy as np
from dask.utils import format_bytes

import dgvm
import dgvm.array as dnp
from dgvm import backends, config
from dgvm.cli.tables import print_chunk_homes, print_workers
from dgvm.client.apply import map_chunks
from dgvm.client.progress import Progress

CPU_MEMORY = ["256MiB", "512MiB", "768MiB"]
CPU_SPEED = [1, 2, 3]


def _fill(xp, chunk, index, starts):
    """Element j of the array holds the value j."""
    v = chunk.view(xp.int64)
    v[:] = xp.arange(starts[index], starts[index] + v.size, dtype=xp.int64)


def _check(xp, chunk, index, starts):
    """(matches, sum) of a chunk, computed where it lives."""
    v = chunk.view(xp.int64)
    expect = xp.arange(starts[index], starts[index] + v.size, dtype=xp.int64)
    return bool((v == expect).all()), int(v.sum())


def _wait_for_ctrl_c() -> None:
    # A process started with SIGINT ignored (a background job of a shell, a child of one
    # that ignores it) keeps ignoring it: Ctrl-C, or SIGINT, must end the wait all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        click.echo("closing the cluster")


def run_demo(backend, n_workers, device_memory, size, chunk_bytes, keep: bool = False) -> int:
    """The demo; with ``keep`` the cluster (and its dashboard) stays up, the array in it,
    until Ctrl-C."""
    backend = backends.resolve(backend or config.get("backend"))
    kwargs = {}
    if backend == "cpu":
        memory = device_memory.split(",") if device_memory else CPU_MEMORY
        n_workers = n_workers or len(memory)
        if len(memory) == 1:
            memory = memory * n_workers
        kwargs = dict(device_memory=memory, device_speed=CPU_SPEED if memory == CPU_MEMORY else None)
    elif device_memory:
        kwargs = dict(device_memory=device_memory)
    click.echo(f"starting a local dgvm cluster ({backend}) ...")
    t0 = time.perf_counter()
    with dgvm.LocalCluster(n_workers=n_workers, backend=backend, **kwargs) as cluster, \
            dgvm.connect(cluster) as client:
        click.echo(f"cluster up in {time.perf_counter() - t0:.1f} s; dashboard: {cluster.dashboard_link}\n")
        workers = dgvm.workers(client=client)
        print_workers(workers)
        largest = max(w.capacity for w in workers)
        nbytes = config.to_bytes(size) if size else int(1.25 * largest)
        chunk = config.to_bytes(chunk_bytes) // 8
        n = nbytes // 8
        click.echo(f"\nallocating an int64 array of {format_bytes(n * 8)} (largest device: "
                   f"{format_bytes(largest)}) in chunks of {format_bytes(chunk * 8)} ...")
        x = dnp.empty((n,), dtype="int64", chunks=(chunk,))
        starts = (x.alloc.offsets[:-1] // 8).tolist()
        batches = np.array_split(np.arange(x.alloc.nchunks), min(10, x.alloc.nchunks))
        with Progress(len(batches), "fill") as bar:
            for b in batches:
                map_chunks(x.alloc, _fill, starts, indices=b.tolist())
                bar.update()
        ok = True
        total = 0
        with Progress(len(batches), "check") as bar:
            for b in batches:
                for match, s in map_chunks(x.alloc, _check, starts, indices=b.tolist()):
                    ok &= match
                    total += s
                bar.update()
        ok &= total == n * (n - 1) // 2
        rng = np.random.default_rng(0)
        probe = rng.integers(0, n, 16)
        for j in probe.tolist():  # read single elements back through the global address
            loc = dgvm.translate(x.vaddr + 8 * j, client=client)
            got = x.alloc.get([(loc.chunk_index, loc.offset, 8)])[0].view(np.int64)[0]
            ok &= int(got) == j
        click.echo(f"\narray {x}: where its {x.alloc.nchunks} chunks live:")
        print_chunk_homes(x.alloc.chunks)
        mid = dgvm.translate(x.vaddr + 8 * (n // 2), client=client)
        click.echo(f"\nelement {n // 2} at {x.vaddr + 8 * (n // 2):#x} -> {mid}")
        click.echo(f"check: sum {total} (expected {n * (n - 1) // 2}), 16 random reads by "
                   f"global address: {'OK' if ok else 'FAILED'}")
        if keep:
            click.echo(f"\nthe cluster stays up with the array in it until Ctrl-C: dashboard "
                       f"{cluster.dashboard_link}")
            _wait_for_ctrl_c()
        else:
            click.echo(f"\ndashboard: {cluster.dashboard_link} (the cluster closes now; "
                       "dgvm demo --keep keeps it up until Ctrl-C)")
        x.free()
    return 0 if ok else 1
