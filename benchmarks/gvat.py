"""How fast the GVAT allocates, frees and translates, in process and through Dask RPC.

    python benchmarks/gvat.py [--chunks 100000] [--translations 200000] [--workers 4]

Part 1 builds a ``dgvm.gvat.GVAT`` in this process, exactly as the scheduler plugin does,
with ``--workers`` fake workers, and times the bookkeeping alone: ``allocate`` under each
placement policy and with ``colocate``, ``free``, ``translate`` and ``chunk_map``.

Part 2 starts a ``dgvm.LocalCluster`` (2 cpu workers, threads of this process) and times
the same operations end to end through the user API: ``dgvm.malloc`` (which includes the
workers creating every chunk buffer), ``free``, ``dgvm.translate_many`` in one request, and
single ``dgvm.translate`` calls for the latency of one RPC.

Each figure is the best of 3 runs (``time.perf_counter``) unless it says otherwise. The
targets of part 1 come from the design (a 100,000-chunk allocation in under 1 s, more
than 100,000 translations/s); part 2 holds the end-to-end figures to the same targets.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
import warnings

import numpy as np

SECOND = "< 1 s"
TRANSLATIONS = "> 100,000/s"


class Table:
    """Rows of (what, figure, target, verdict), printed as they come."""

    def __init__(self):
        self.rows: list[tuple[str, str, str, str]] = []
        print(f"{'what':<52} {'figure':>22}  {'target':<12} ")

    def section(self, title: str) -> None:
        print(f"-- {title} " + "-" * max(0, 88 - len(title)))

    def add(self, what: str, figure: str, target: str = "-", ok: bool | None = None) -> None:
        verdict = "" if ok is None else ("ok" if ok else "MISS")
        self.rows.append((what, figure, target, verdict))
        print(f"{what:<52} {figure:>22}  {target:<12} {verdict}", flush=True)

    def seconds(self, what: str, t: float, limit: float | None = None) -> None:
        if limit is None:
            self.add(what, _fmt_s(t))
        else:
            self.add(what, _fmt_s(t), f"< {limit:g} s", t < limit)

    def rate(self, what: str, n: int, t: float, floor: float | None = None) -> None:
        r = n / t
        if floor is None:
            self.add(what, f"{r:,.0f}/s")
        else:
            self.add(what, f"{r:,.0f}/s", f"> {floor:,.0f}/s", r > floor)


def _fmt_s(t: float) -> str:
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.0f} us"


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


# -- part 1: the GVAT in this process ----------------------------------------------------
def make_gvat(n_workers: int):
    """A GVAT configured as ``GVATPlugin.__init__`` does, with fake workers registered."""
    from dgvm import config
    from dgvm.gvat import GVAT
    from dgvm.protocol.records import DeviceProfile

    gvat = GVAT(
        base=int(config.get("address-space.base")),
        size=int(config.get("address-space.size")),
        alignment=config.get_bytes("address-space.alignment"),
        headroom=float(config.get("placement.headroom")),
    )
    for i in range(n_workers):
        # Two device models, one twice as fast, so that "balanced" has to weigh speeds.
        fast = i % 2 == 1
        profile = DeviceProfile(
            backend="cpu",
            device=f"cpu:{i}",
            name="fake-fast" if fast else "fake",
            capacity=2**50,  # 1 PiB: capacity never limits these runs
            bandwidth=2e12 if fast else 1e12,
        )
        gvat.inventory.register(f"tcp://10.0.0.{i + 1}:9000", profile)
    return gvat


def bench_gvat(table: Table, n_chunks: int, n_translations: int, n_workers: int, rng) -> None:
    gvat = make_gvat(n_workers)
    sizes = np.full(n_chunks, 4096, dtype=np.int64)
    owner = "bench-client"
    table.section(f"in-process GVAT: {n_chunks:,} chunks of 4 KiB, {n_workers} fake workers")

    frees = []
    for policy in ("balanced", "packed", "round_robin"):
        best = float("inf")
        for _ in range(3):
            t, alloc = timed(gvat.allocate, owner, sizes, placement=policy)
            best = min(best, t)
            t, _ = timed(gvat.free, alloc.alloc_id)
            frees.append(t)
        table.seconds(f"allocate {n_chunks:,} chunks, {policy}", best, 1.0)

    partner = gvat.allocate(owner, sizes, placement="balanced")
    best = float("inf")
    for _ in range(3):
        t, alloc = timed(gvat.allocate, owner, sizes, colocate=partner.alloc_id)
        best = min(best, t)
        assert (alloc.homes == partner.homes).all(), "colocate did not follow its partner"
        gvat.free(alloc.alloc_id)
    table.seconds(f"allocate {n_chunks:,} chunks, colocate", best, 1.0)
    table.seconds(f"free {n_chunks:,} chunks (best of {len(frees)})", min(frees))

    # Several live allocations, as a busy scheduler has: the big one, a few of large
    # chunks, and an array-like one whose chunks are not all the same size (the
    # searchsorted path of chunk_at).
    allocs = [partner]
    for k in range(4):
        allocs.append(gvat.allocate(owner, np.full(1000 * (k + 1), 64 << 20, dtype=np.int64)))
    allocs.append(gvat.allocate(owner, rng.integers(1, 1 << 20, size=5000, dtype=np.int64)))
    pick = rng.integers(0, len(allocs), size=n_translations)
    nbytes = np.array([a.nbytes for a in allocs], dtype=np.int64)
    starts = np.array([a.vaddr for a in allocs], dtype=np.int64)
    vaddrs = (starts[pick] + (rng.random(n_translations) * nbytes[pick]).astype(np.int64)).tolist()
    for v, j in list(zip(vaddrs, pick.tolist()))[:1000]:  # spot-check the answers
        loc = gvat.translate(v)
        a = allocs[j]
        assert loc.alloc_id == a.alloc_id
        assert a.offsets[loc.chunk_index] + loc.offset == v - a.vaddr

    translate = gvat.translate
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for v in vaddrs:
            translate(v)
        best = min(best, time.perf_counter() - t0)
    table.rate(f"translate, {n_translations:,} random addresses in {len(allocs)} allocs", n_translations, best, 100_000)

    best = min(timed(gvat.chunk_map, partner)[0] for _ in range(3))
    table.seconds(f"chunk_map of the {n_chunks:,}-chunk allocation", best)


# -- part 2: the same through a real cluster ---------------------------------------------
def bench_cluster(table: Table, n_chunks: int, n_batch: int, n_single: int, rng) -> None:
    import dgvm

    table.section("via Dask RPC: LocalCluster, 2 cpu workers of 2 GiB, threads")
    t, cluster = timed(
        dgvm.LocalCluster,
        n_workers=2, backend="cpu", device_memory="2GiB", processes=False, dashboard_address=None,
    )
    client = dgvm.connect(cluster)
    try:
        nbytes = n_chunks * 4096
        mallocs, frees = [], []
        for _ in range(3):
            t, buf = timed(dgvm.malloc, nbytes, chunk_bytes=4096)
            assert buf.nchunks == n_chunks
            mallocs.append(t)
            t, _ = timed(buf.free)
            frees.append(t)
        # The first malloc touches fresh pages of the workers' arenas; later ones reuse them.
        table.seconds(f"malloc {n_chunks:,} x 4 KiB, first (cold arenas)", mallocs[0], 1.0)
        table.seconds(f"malloc {n_chunks:,} x 4 KiB, best of 3", min(mallocs), 1.0)
        table.seconds(f"free {n_chunks:,} chunks", min(frees))

        buf = dgvm.malloc(nbytes, chunk_bytes=4096)
        vaddrs = (buf.vaddr + rng.integers(0, buf.nbytes, size=n_batch)).tolist()
        best = float("inf")
        for _ in range(3):
            t, locs = timed(dgvm.translate_many, vaddrs)
            best = min(best, t)
        assert len(locs) == n_batch and all(loc.alloc_id == buf.alloc_id for loc in locs)
        table.rate(f"translate_many, {n_batch:,} addresses in 1 request", n_batch, best, 100_000)

        single = vaddrs[:n_single]
        dgvm.translate(single[0])  # warm the connection
        lat = []
        for v in single:
            t0 = time.perf_counter()
            dgvm.translate(v)
            lat.append(time.perf_counter() - t0)
        lat.sort()
        p99 = lat[int(0.99 * (len(lat) - 1))]
        table.add(
            f"translate, one RPC each ({n_single:,} calls)",
            f"{_fmt_s(statistics.mean(lat))}/call",
        )
        table.add("  same, median / p99", f"{_fmt_s(lat[len(lat) // 2])} / {_fmt_s(p99)}")
        buf.free()
    finally:
        # Workers leaving at shutdown log "chunks are marked lost"; nothing is allocated now.
        logging.getLogger("dgvm").setLevel(logging.ERROR)
        client.close()
        cluster.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks per allocation")
    parser.add_argument("--translations", type=int, default=200_000, help="in-process translations")
    parser.add_argument("--workers", type=int, default=4, help="fake workers of the in-process GVAT")
    parser.add_argument("--batch", type=int, default=100_000, help="addresses of one translate_many")
    parser.add_argument("--single", type=int, default=2000, help="single translate RPCs")
    parser.add_argument("--no-cluster", action="store_true", help="skip the Dask RPC part")
    args = parser.parse_args(argv)

    import dask
    import distributed  # configures its loggers on import; quieten them after

    logging.getLogger("distributed").setLevel(logging.WARNING)  # INFO lines out of the table
    # The scheduler's HTTP server binds :8787 even with dashboard_address=None; another
    # cluster on this machine only moves it to a random port.
    warnings.filterwarnings("ignore", message="Port 8787 is already in use")

    print(
        f"dgvm GVAT benchmark | python {platform.python_version()}, numpy {np.__version__}, "
        f"dask {dask.__version__}, distributed {distributed.__version__}, "
        f"{os.cpu_count()} cpus, {platform.machine()}"
    )
    rng = np.random.default_rng(0)
    table = Table()
    t0 = time.perf_counter()
    bench_gvat(table, args.chunks, args.translations, args.workers, rng)
    if not args.no_cluster:
        bench_cluster(table, args.chunks, args.batch, args.single, rng)
    misses = [r for r in table.rows if r[3] == "MISS"]
    print(f"{len(misses)} of {sum(r[3] != '' for r in table.rows)} targets missed; "
          f"run took {time.perf_counter() - t0:.1f} s")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
