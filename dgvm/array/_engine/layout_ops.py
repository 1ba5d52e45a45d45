"""Blockwise ops that lay the same elements out anew: concatenation, reshape, rechunk.

Each output chunk reads the input region(s) its elements come from (through the
migration layer where they are elsewhere): one input for a concatenation (its chunks
never straddle two), the rows covering its run of the flat array for a reshape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Concat:
    """Output chunks along ``axis`` never straddle two inputs: each reads one of them."""

    axis: int
    starts: tuple  # start of each input along axis

    def block(self, read, lo, hi, xp):
        i = int(np.searchsorted(self.starts, lo[self.axis], side="right")) - 1
        ilo, ihi = list(lo), list(hi)
        ilo[self.axis] -= self.starts[i]
        ihi[self.axis] -= self.starts[i]
        return read(i, ilo, ihi)


@dataclass
class Reshape:
    """C-order reshape: an output chunk's rows (full trailing axes) are a contiguous run of
    the flat array; read the input rows that cover that run, cut it, then the chunk."""

    in_shape: tuple
    out_shape: tuple

    def block(self, read, lo, hi, xp):
        if not self.out_shape:  # one element
            return read(0, [0] * len(self.in_shape), list(self.in_shape)).reshape(())
        out_row = int(np.prod(self.out_shape[1:], dtype=np.int64))
        in_row = int(np.prod(self.in_shape[1:], dtype=np.int64)) if self.in_shape else 1
        f0, f1 = lo[0] * out_row, hi[0] * out_row
        r0, r1 = f0 // in_row, -(-f1 // in_row)
        if self.in_shape:
            slab = read(0, [r0] + [0] * (len(self.in_shape) - 1), [r1, *self.in_shape[1:]])
        else:
            slab = read(0, [], [])
        flat = slab.reshape(-1)[f0 - r0 * in_row:f1 - r0 * in_row]
        rows = flat.reshape((hi[0] - lo[0],) + tuple(self.out_shape[1:]))
        return rows[(slice(None),) + tuple(slice(l, h) for l, h in zip(lo[1:], hi[1:]))]


@dataclass
class Copy:
    """The same region of the input (rechunk: the output's chunks cut it anew)."""

    def block(self, read, lo, hi, xp):
        return read(0, lo, hi)
