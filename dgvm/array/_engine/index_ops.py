"""Blockwise and partial ops of integer-array gathers along one axis (``index_gather``).

The indices are an int array on the workers, cut into runs (``rows``: the output's
chunks along the axis). ``Histogram`` counts, per run, the indices that fall in each
block of the input along the axis; ``Pick`` copies, on the worker of an input chunk, the
rows a run asks of it, in the run's order; ``Place`` makes an output chunk from the
rows of the input block it sits beside and the picked rows of the others.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def runs_of(length: int, cut: int) -> list[int]:
    """Even runs of at most ``cut`` indices covering ``length`` of them."""
    if length <= 0:
        return []
    k = -(-length // cut)
    base, extra = divmod(length, k)
    return [base + 1] * extra + [base] * (k - extra)


def within(v, n: int, xp):
    """Indices ``v`` along an axis of length ``n``, negative ones counted from the end."""
    signed = v.dtype.kind == "i"
    v = v.astype(np.int64, copy=False)
    return xp.where(v < 0, v + n, v) if signed else v


@dataclass
class Histogram:
    """Partial of the indices: per run of the chunk (runs of at most ``cut``, from the
    chunk's start), how many fall in each block of the input (``edges``: its block
    starts along the axis); and the smallest and largest index, as given."""

    n: int
    edges: np.ndarray
    cut: int

    def partial(self, chunk, lo, hi, xp):
        raw = chunk.reshape(-1)
        v = within(raw, self.n, xp)
        nb = len(self.edges) - 1
        runs = runs_of(hi[0] - lo[0], self.cut)
        run = xp.repeat(xp.arange(len(runs)), runs) if len(runs) > 1 else xp.zeros(len(v), np.int64)
        block = xp.searchsorted(xp.asarray(self.edges[1:-1]), v, side="right")
        counts = xp.bincount(run * nb + block, minlength=len(runs) * nb).reshape(len(runs), nb)
        bounds = np.asarray([int(raw.min()), int(raw.max())], dtype=np.int64)
        return _host(counts).astype(np.int64), bounds


@dataclass
class Plan:
    """Where a gather's rows come from, as the caller works it out from the counts and
    every task derives the rest: ``counts[r, b]`` of run r's indices fall in input block
    b; each run's output chunks sit beside its ``best`` block (the one that gives most),
    and every other (run, block) pair with rows is a piece, numbered in C order."""

    axis: int
    n: int  # length of the input along the axis
    edges: np.ndarray  # input block starts along the axis
    rows: np.ndarray  # run starts (the output's block starts along the axis)
    counts: np.ndarray  # (runs, blocks)

    @functools.cached_property
    def best(self) -> np.ndarray:
        return self.counts.argmax(axis=1)

    @functools.cached_property
    def piece(self) -> np.ndarray:
        """(runs, blocks): the piece number of each pair, -1 for none."""
        has = self.counts > 0
        has[np.arange(len(has)), self.best] = False
        out = np.full(has.shape, -1, dtype=np.int64)
        out[has] = np.arange(int(has.sum()))
        return out

    @functools.cached_property
    def pairs(self) -> np.ndarray:
        """(pieces, 2): the run and block of each piece."""
        return np.argwhere(self.piece >= 0)

    @functools.cached_property
    def starts(self) -> np.ndarray:
        """Where each piece starts along the axis of the pieces array (and their total)."""
        sizes = self.counts[self.piece >= 0].astype(np.int64)
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def indices(self, read, r: int, xp):
        """Run r's indices, made non-negative (input 1 of the ops)."""
        return within(read(1, [int(self.rows[r])], [int(self.rows[r + 1])]), self.n, xp)

    def input_block(self, lo, hi, b: int):
        """The bounds of the input chunk at block b along the axis, the output chunk's
        blocks elsewhere."""
        xlo, xhi = list(lo), list(hi)
        xlo[self.axis], xhi[self.axis] = int(self.edges[b]), int(self.edges[b + 1])
        return xlo, xhi

    def __getstate__(self):  # only the fields travel: the rest is derived where needed
        return {f: self.__dict__[f] for f in ("axis", "n", "edges", "rows", "counts")}


@dataclass
class Pick:
    """A piece (input 0: the array, 1: the indices): the rows that a run asks of an
    input block other than its best, in the run's order."""

    plan: Plan

    def block(self, read, lo, hi, xp):
        p = self.plan
        k = int(np.searchsorted(p.starts, lo[p.axis], side="right")) - 1
        r, b = (int(v) for v in p.pairs[k])
        v = p.indices(read, r, xp)
        xlo, xhi = p.input_block(lo, hi, b)
        e0, e1 = xlo[p.axis], xhi[p.axis]
        return xp.take(read(0, xlo, xhi), v[(v >= e0) & (v < e1)] - e0, axis=p.axis)


@dataclass
class Place:
    """An output chunk (input 0: the array, 1: the indices, 2: the pieces): each row from
    the input block it sits beside, read in place, or from the piece of its block."""

    plan: Plan

    def block(self, read, lo, hi, xp):
        p = self.plan
        a = p.axis
        r = int(np.searchsorted(p.rows, lo[a], side="right")) - 1
        v = p.indices(read, r, xp)
        block = xp.searchsorted(xp.asarray(p.edges[1:-1]), v, side="right")
        b0 = int(p.best[r])
        out = None
        for b in [b0] + [int(b) for b in np.flatnonzero(p.piece[r] >= 0)]:
            sel = block == b
            if b == b0:
                xlo, xhi = p.input_block(lo, hi, b)
                part = xp.take(read(0, xlo, xhi), v[sel] - xlo[a], axis=a)
                if part.shape[a] == len(v):  # every row from here
                    return part
            else:
                k = int(p.piece[r, b])
                plo, phi = list(lo), list(hi)
                plo[a], phi[a] = int(p.starts[k]), int(p.starts[k + 1])
                part = read(2, plo, phi)
            if out is None:
                out = xp.empty([h - l for l, h in zip(lo, hi)], dtype=part.dtype)
            out[(slice(None),) * a + (sel,)] = part
        return out
