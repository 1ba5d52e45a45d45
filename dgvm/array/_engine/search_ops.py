"""Blockwise and partial ops of the searching functions (``searchsorted``, ``nonzero``).

``searchsorted``: the caller learns the first value of every block of ``x1`` (``Heads``);
each chunk of ``x2`` is answered on its home worker (``Search``), which reads only the
blocks of ``x1`` its values fall in (a binary search among the blocks' first values,
then one in each block needed), in the order of ``sort_keys`` (NaN last).

``nonzero``: a first pass counts the nonzero elements of every chunk (``CountNonzero``);
each piece of the result is made on its home worker from its row block (``Nonzero``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.sort_keys import count_before, sort_key


@dataclass
class Heads:
    """Partial: the first element of a 1-d chunk."""

    def partial(self, chunk, lo, hi, xp):
        return chunk[:1].copy()  # never a view of the store's memory


@dataclass
class MinMax:
    def partial(self, chunk, lo, hi, xp):
        return np.asarray([int(chunk.min()), int(chunk.max())])


@dataclass
class Search:
    """Blockwise: positions in ``x1`` (input 1, sorted) of the values of ``x2`` (input 0)."""

    inclusive: bool  # side="right"
    heads: np.ndarray  # first value of every block of x1
    starts: np.ndarray  # block starts of x1

    def block(self, read, lo, hi, xp):
        v = read(0, lo, hi)
        q = sort_key(v.reshape(1, -1), xp)
        heads = sort_key(xp.asarray(self.heads).reshape(1, -1), xp)
        # Blocks before ``j - 1`` lie wholly before each value, blocks from ``j`` on after it.
        j = count_before(heads, q, self.inclusive, False, xp)[0] - 1
        out = xp.zeros(q.shape[1], dtype=np.int64)
        for b in xp.unique(j).tolist():
            if b < 0:
                continue
            sel = j == b
            a = sort_key(read(1, [int(self.starts[b])], [int(self.starts[b + 1])]).reshape(1, -1), xp)
            out[sel] = count_before(a, q[:, sel], self.inclusive, False, xp)[0] + int(self.starts[b])
        return out.reshape(v.shape)


@dataclass
class Gather1d:
    """Blockwise: ``x[idx]`` for a 1-d ``x`` (input 1) and the indices of input 0."""

    def block(self, read, lo, hi, xp):
        idx = read(0, lo, hi)
        first, last = int(idx.min()), int(idx.max()) + 1
        return read(1, [first], [last])[idx - first]


@dataclass
class Nonzero:
    """Blockwise: coordinate ``axis`` of the nonzero elements ``[lo, hi)`` (C order),
    taken from the row block that holds them."""

    axis: int
    firsts: np.ndarray  # position in the result of each row block's first nonzero
    rows: np.ndarray  # row block starts along axis 0
    shape: tuple

    def block(self, read, lo, hi, xp):
        s = int(np.searchsorted(self.firsts, lo[0], side="right")) - 1
        r0, r1 = int(self.rows[s]), int(self.rows[s + 1])
        region = read(0, [r0] + [0] * (len(self.shape) - 1), [r1] + list(self.shape[1:]))
        base = int(self.firsts[s])
        found = xp.nonzero(region)[self.axis][lo[0] - base: hi[0] - base].astype(np.int64)
        return found + r0 if self.axis == 0 else found


@dataclass
class CountNonzero:
    """Partial: the nonzero elements of a chunk over ``axes``."""

    axes: tuple

    def partial(self, chunk, lo, hi, xp):
        return xp.sum(chunk != 0, axis=self.axes, keepdims=True, dtype=np.int64)
