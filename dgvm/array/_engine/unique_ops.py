"""Partial and blockwise ops of the set functions (``unique_*``).

Every chunk finds its own distinct values (sorted, in the order of ``sort_keys``), how
often each occurs there and the flat index (C order of the whole array) of its first
occurrence, plus the flat indices of its NaNs (``LocalUnique``); the caller merges them.
``Inverse`` makes the inverse indices back on the workers: each chunk binary-searches
its values among the distinct values it can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.sort_keys import argsort_lines, block_of, count_before, sort_key


def flat_index(local, chunk_shape, lo, shape, xp):
    """Flat indices in the whole array of flat indices ``local`` within a chunk."""
    out = xp.zeros(local.shape, dtype=np.int64)
    rest = local
    for a in reversed(range(len(shape))):
        coord = rest % chunk_shape[a] + lo[a]
        rest = rest // chunk_shape[a]
        stride = int(np.prod(shape[a + 1:], dtype=np.int64))
        out = out + coord * stride
    return out


@dataclass
class LocalUnique:
    """Partial: (distinct values, their counts, first flat indices, NaNs' flat indices,
    the NaNs themselves)."""

    shape: tuple

    def partial(self, chunk, lo, hi, xp):
        flat = chunk.reshape(-1)
        keys = sort_key(flat, xp)
        order = argsort_lines(keys.reshape(1, -1), False, xp)[0]
        ordered = keys[order]
        n = int(ordered.shape[0])
        if flat.dtype.kind in "fc":
            n = int(xp.count_nonzero(~xp.isnan(ordered)))  # NaNs sort last
        new = xp.ones(n, dtype=bool)
        if n > 1:
            new[1:] = ordered[1:n] != ordered[: n - 1]
        at = xp.nonzero(new)[0]
        counts = xp.diff(xp.concatenate([at, xp.asarray([n], dtype=at.dtype)])).astype(np.int64)
        first = order[at]  # stable: the earliest of equal values
        to_flat = lambda i: flat_index(i, chunk.shape, lo, self.shape, xp)  # noqa: E731
        return flat[first], counts, to_flat(first), to_flat(order[n:]), flat[order[n:]]


@dataclass
class Inverse:
    """Blockwise: each element's index among the distinct values (input 1)."""

    starts: list
    ranges: dict  # block -> (first, last + 1) of the distinct values the chunk holds
    nan_ranks: dict  # block -> the entries of the chunk's NaNs (C order), or absent

    def block(self, read, lo, hi, xp):
        block = block_of(self.starts, lo)
        x = read(0, lo, hi)
        q = sort_key(x.reshape(1, -1), xp)
        first, last = self.ranges[block]
        if last > first:
            values = sort_key(read(1, [first], [last]).reshape(1, -1), xp)
            out = count_before(values, q, False, False, xp)[0] + first
        else:
            out = xp.zeros(q.shape[1], dtype=np.int64)
        nans = self.nan_ranks.get(block)
        if nans is not None:
            out[xp.isnan(q[0])] = xp.asarray(nans)
        return out.reshape(x.shape)
