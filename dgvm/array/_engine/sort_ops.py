"""Blockwise ops of sorting: local sorts of each chunk's lines, and the merge.

An axis of one block sorts each chunk where it lives (``LocalSort``). Several blocks
sort locally first, then each output chunk merges the runs the splits give it
(``sort_splits``) from every input block (``Merge``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.sort_keys import (
    argsort_lines, block_of, cross_of, from_lines, sort_key, stable_argsort, to_lines,
)


@dataclass
class LocalSort:
    """Each chunk's lines sorted: the values, or the global indices along the axis."""

    axis: int
    descending: bool
    indices: bool

    def block(self, read, lo, hi, xp):
        x = read(0, lo, hi)
        lines = to_lines(x, self.axis, xp)
        order = argsort_lines(sort_key(lines, xp), self.descending, xp)
        out = order + lo[self.axis] if self.indices else xp.take_along_axis(lines, order, axis=1)
        return from_lines(out, self.axis, x.shape, xp)


@dataclass
class TakeLocal:
    """Values of input 0 at the chunk-local order of input 1 (global indices)."""

    axis: int

    def block(self, read, lo, hi, xp):
        x = read(0, lo, hi)
        order = to_lines(read(1, lo, hi), self.axis, xp) - lo[self.axis]
        return from_lines(xp.take_along_axis(to_lines(x, self.axis, xp), order, axis=1),
                          self.axis, x.shape, xp)


@dataclass
class Merge:
    """Output chunk j of a multi-block sort: the runs ``[c_j[b], c_j+1[b])`` of every
    input block's sorted lines, merged."""

    axis: int
    descending: bool
    indices: bool
    starts: list
    splits: dict  # cross block -> (m, B + 1, B)

    def block(self, read, lo, hi, xp):
        ax = self.axis
        block = block_of(self.starts, lo)
        c = self.splits[cross_of(block, ax)]
        j = block[ax]
        first, last = c[:, j, :], c[:, j + 1, :]
        values, index, keep = [], [], []
        for b in range(c.shape[2]):
            p0, p1 = int(first[:, b].min()), int(last[:, b].max())
            if p1 <= p0:
                continue
            rlo, rhi = list(lo), list(hi)
            rlo[ax], rhi[ax] = int(self.starts[ax][b]) + p0, int(self.starts[ax][b]) + p1
            values.append(to_lines(read(0, rlo, rhi), ax, xp))
            if self.indices:
                index.append(to_lines(read(1, rlo, rhi), ax, xp))
            pos = np.arange(p0, p1)
            keep.append((pos >= first[:, b:b + 1]) & (pos < last[:, b:b + 1]))
        v = xp.concatenate(values, axis=1)
        order = argsort_lines(sort_key(v, xp), self.descending, xp)
        keep = np.concatenate(keep, axis=1)
        if not keep.all():  # lines take runs of different lengths: the taken ones first
            kept = xp.take_along_axis(xp.asarray(keep), order, axis=1)
            order = xp.take_along_axis(order, stable_argsort((~kept).astype(np.uint8), xp), axis=1)
        order = order[:, : hi[ax] - lo[ax]]
        src = xp.concatenate(index, axis=1) if self.indices else v
        return from_lines(xp.take_along_axis(src, order, axis=1), ax,
                          [h - l for l, h in zip(lo, hi)], xp)
