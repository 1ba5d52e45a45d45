"""Blockwise ops of sorting: local sorts of each chunk's lines, and the merge.

An axis of one block sorts each chunk where it lives (``LocalSort``); values alone are
sorted by the backend's own sort, in place in the result's chunk where it is home (a
stable sort only where zeros of both signs make equal values distinguishable). Several
blocks sort locally first; then chunks that hold whole lines merge their runs (``SortRuns``),
or, where a line is too long for one chunk, each output chunk merges the runs the
splits give it (``sort_splits``) from every input block (``Merge``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.sort_keys import (
    argsort_lines, block_of, cross_of, from_lines, mixed_zeros, order_key, to_lines,
)
from dgvm.backends import working_memory

# Bytes per element a sort of lines takes besides copies of the values: the order as int64,
# the sort's buffers, the indices of the result. NumPy sorts the values themselves; other
# backends also make keys, copy them and the values in their sort, and take the values.
SORT_WORK_PER_ELEMENT = 32


def sorted_values(x, axis: int, descending: bool, xp, into=None, runs: bool = False):
    """``x`` sorted along ``axis`` (into ``into`` when given). On NumPy its own sort (a
    descending sort is the reverse of an ascending sort of the reversed lines, which keeps
    equal values in their order; ``runs``: lines made of sorted runs, which its stable
    sort merges); on other backends by the keys of ``sort_keys``."""
    if xp is not np:
        lines = to_lines(x, axis, xp)
        order = argsort_lines(order_key(lines, xp), descending, xp)
        out = from_lines(xp.take_along_axis(lines, order, axis=1), axis, x.shape, xp)
    else:
        kind = "stable" if runs or mixed_zeros(x, xp) else None
        if not descending and into is not None:
            into[...] = x
            into.sort(axis=axis, kind=kind)
            return into
        out = np.sort(np.flip(x, axis=axis) if descending else x, axis=axis, kind=kind)
        if descending:
            out = np.flip(out, axis=axis)
    if into is None:
        return out
    into[...] = out
    return into


@dataclass
class LocalSort:
    """Each chunk's lines sorted: the values, or the global indices along the axis."""

    axis: int
    descending: bool
    indices: bool

    def block(self, read, lo, hi, xp):
        x = read(0, lo, hi)
        if not self.indices and xp is np:
            return sorted_values(x, self.axis, self.descending, xp)
        # Lines sort apart: a slice of them at a time, within the working-memory budget.
        lines = to_lines(x, self.axis, xp)
        m, n = lines.shape
        per_line = n * (SORT_WORK_PER_ELEMENT + (0 if xp is np else 4 * x.dtype.itemsize))
        working_memory.need(per_line, f"a sort of lines of {n} elements ({x.dtype})")
        rows = max(1, working_memory.budget() // max(per_line, 1))
        out = xp.empty((m, n), dtype=np.int64 if self.indices else x.dtype)
        for r0 in range(0, m, rows):
            part = lines[r0:r0 + rows]
            order = argsort_lines(order_key(part, xp), self.descending, xp)
            out[r0:r0 + rows] = order + lo[self.axis] if self.indices else xp.take_along_axis(part, order, axis=1)
        return from_lines(out, self.axis, x.shape, xp)

    def block_into(self, read, lo, hi, xp, target) -> bool:
        """Values on NumPy: sorted in the result's own chunk, with no temporary."""
        if self.indices or xp is not np:
            return False
        sorted_values(read(0, lo, hi), self.axis, self.descending, xp, into=target)
        return True


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
class SortRuns:
    """A chunk of whole lines, each made of the locally sorted runs of every input block
    (input 0: values, input 1: their global indices), merged by one stable sort."""

    axis: int
    descending: bool
    indices: bool

    def block(self, read, lo, hi, xp):
        v = read(0, lo, hi)
        if not self.indices:
            return sorted_values(v, self.axis, self.descending, xp, runs=True)
        lines = to_lines(v, self.axis, xp)
        order = argsort_lines(order_key(lines, xp), self.descending, xp)
        index = to_lines(read(1, lo, hi), self.axis, xp)
        return from_lines(xp.take_along_axis(index, order, axis=1), self.axis, v.shape, xp)


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
        src = xp.concatenate(index, axis=1) if self.indices else None
        keep = np.concatenate(keep, axis=1)
        m, w = v.shape[0], hi[ax] - lo[ax]
        if not keep.all():  # lines take runs of different lengths, but each w elements in all
            keep = xp.asarray(keep)
            v = v[keep].reshape(m, w)
            src = None if src is None else src[keep].reshape(m, w)
        shape = [h - l for l, h in zip(lo, hi)]
        # The runs are in block order, each in its stable local order: equal values in
        # their original order, which a stable sort of them keeps.
        if not self.indices:
            return from_lines(sorted_values(v, 1, self.descending, xp, runs=True), ax, shape, xp)
        order = argsort_lines(order_key(v, xp), self.descending, xp)
        return from_lines(xp.take_along_axis(src, order, axis=1), ax, shape, xp)
