"""The tables ``dgvm info`` and ``dgvm demo`` print."""

from __future__ import annotations

from collections import defaultdict

import click
from dask.utils import format_bytes


def print_table(rows: list[list], headers: list[str]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for k, r in enumerate(cells):
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            click.echo("  ".join("-" * w for w in widths))


def print_workers(workers) -> None:
    print_table(
        [
            [w.address, w.device, w.name, format_bytes(w.capacity), format_bytes(w.used),
             format_bytes(w.free), w.chunks, f"{w.bandwidth / 1e9:.1f} GB/s", f"{w.speed:.2f}",
             w.status]
            for w in workers
        ],
        ["worker", "device", "name", "capacity", "used", "free", "chunks", "bandwidth", "speed", "status"],
    )


def print_allocations(allocs) -> None:
    print_table(
        [
            [a.alloc_id, a.owner[:24], f"{a.vaddr:#x}", format_bytes(a.nbytes), a.nchunks,
             a.placement, a.dtype or "-", a.shape or "-"]
            for a in allocs
        ],
        ["id", "owner", "vaddr", "size", "chunks", "placement", "dtype", "shape"],
    )


def print_chunk_homes(chunks) -> None:
    """One row per worker: how many chunks and bytes of an allocation it holds."""
    per = defaultdict(lambda: [0, 0, None, None, ""])
    for c in chunks:
        row = per[c.worker]
        row[0] += 1
        row[1] += c.nbytes
        row[2] = c.index if row[2] is None else min(row[2], c.index)
        row[3] = c.index if row[3] is None else max(row[3], c.index)
        row[4] = c.device
    print_table(
        [[w, r[4], r[0], format_bytes(r[1]), f"{r[2]}..{r[3]}"] for w, r in per.items()],
        ["worker", "device", "chunks", "bytes", "chunk indices"],
    )
