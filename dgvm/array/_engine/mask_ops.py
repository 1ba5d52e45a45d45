"""Blockwise and partial ops of boolean masks (``mask_select``).

``LineCounts`` counts the true elements of every line (the last axis) of each chunk of
the mask; ``Total`` sums a chunk; ``Compact`` copies a chunk's selected elements (C
order) into its piece, ``Positions`` the positions of a 1-d mask's true elements;
``Interleave`` lays the pieces of a row block out in C order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def exclusive(a: np.ndarray) -> np.ndarray:
    """The exclusive running sum of ``a`` in C order, of its shape."""
    out = np.zeros(a.size, dtype=np.int64)
    np.cumsum(a.reshape(-1)[:-1], out=out[1:])
    return out.reshape(a.shape)


@dataclass
class LineCounts:
    """Blockwise, on an array of shape ``x.shape[:-1] + (blocks along the last axis,)``:
    per line of the mask's chunk at the same block, its true elements (input 0: the
    mask; ``edges``: x's block starts along the last axis)."""

    edges: np.ndarray

    def block(self, read, lo, hi, xp):
        j = lo[-1]
        m = read(0, list(lo[:-1]) + [int(self.edges[j])], list(hi[:-1]) + [int(self.edges[j + 1])])
        return m.sum(axis=-1, dtype=np.int64, keepdims=True)


@dataclass
class Total:
    """Partial: the sum of a chunk."""

    def partial(self, chunk, lo, hi, xp):
        return np.asarray(int(chunk.sum()), dtype=np.int64)


@dataclass
class Compact:
    """A piece (1-d): the elements of x (input 0) where the mask (input 1) is true, in C
    order, of the chunk of x whose bounds ``bounds[k]`` give piece k (``starts``)."""

    starts: np.ndarray
    bounds: list  # per piece: (lo, hi) of its chunk of x

    def block(self, read, lo, hi, xp):
        k = int(np.searchsorted(self.starts, lo[0], side="right")) - 1
        xlo, xhi = self.bounds[k]
        return read(0, xlo, xhi)[read(1, xlo, xhi)]


@dataclass
class Positions:
    """A piece (1-d): the positions where a 1-d mask (input 0) is true, of the chunk whose
    bounds ``bounds[k]`` give piece k (``starts``)."""

    starts: np.ndarray
    bounds: list

    def block(self, read, lo, hi, xp):
        k = int(np.searchsorted(self.starts, lo[0], side="right")) - 1
        (first,), (last,) = self.bounds[k]
        return xp.flatnonzero(read(0, [first], [last])).astype(np.int64) + first


@dataclass
class Interleave:
    """A run ``[lo, hi)`` of the result (input 0: the pieces, 1: the line counts), which
    lies within one row block (block along axis 0) of x: its elements in C order, taken
    from the pieces of the row block's chunks segment by segment (a segment: one line
    of one chunk)."""

    out_starts: np.ndarray  # where each row block's elements start in the result
    edges: list  # x's block starts, per axis
    chunks: list  # per row block: [(block index, piece start)] of its chunks with a piece

    def block(self, read, lo, hi, xp):
        s, e = lo[0], hi[0]
        b0 = int(np.searchsorted(self.out_starts, s, side="right")) - 1
        nd = len(self.edges)
        r0, r1 = int(self.edges[0][b0]), int(self.edges[0][b0 + 1])
        inner = [int(ed[-1]) for ed in self.edges[1:-1]]
        cnt = _host(read(1, [r0] + [0] * (nd - 2) + [0], [r1] + inner + [len(self.edges[-1]) - 1]))
        # Where each segment starts in the result: lines in C order, then blocks along
        # the last axis.
        seg_out = exclusive(cnt) + int(self.out_starts[b0])
        out = None
        for block, piece_start in self.chunks[b0]:
            sl = tuple(slice(int(ed[b]), int(ed[b + 1])) for ed, b in zip(self.edges[1:-1], block[1:-1]))
            at = (slice(None),) + sl + (block[-1],)
            so, sn = seg_out[at].reshape(-1), cnt[at].reshape(-1)
            k0 = int(np.clip(s - so, 0, sn).sum())  # the piece's elements before s, before e
            k1 = int(np.clip(e - so, 0, sn).sum())
            if k1 <= k0:
                continue
            ps = exclusive(sn)
            t0 = int(np.searchsorted(ps + sn, k0, side="right"))
            t1 = int(np.searchsorted(ps, k1, side="left"))
            pos = np.repeat(so[t0:t1] - ps[t0:t1], sn[t0:t1]) + np.arange(ps[t0], ps[t0] + sn[t0:t1].sum())
            pos = pos[k0 - ps[t0]:k1 - ps[t0]] - s
            vals = read(0, [piece_start + k0], [piece_start + k1])
            if out is None:
                out = xp.empty(e - s, dtype=vals.dtype)
            out[xp.asarray(pos)] = vals
        return out
