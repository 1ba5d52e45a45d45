"""Blockwise ops of the creation functions: each chunk is made where it lives.

A fill, a range, an identity matrix, a triangle or a coordinate grid is computed on the
workers that hold its chunks (one task per worker), never sent from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Fill:
    value: object
    dtype: object

    def block(self, read, lo, hi, xp):
        return xp.full([h - l for l, h in zip(lo, hi)], self.value, dtype=self.dtype)


@dataclass
class Range:
    """``start + i * step`` for global indices i (arange, linspace)."""

    start: float
    step: float
    dtype: object
    last: object = None  # linspace with endpoint: the exact final value at index n-1
    n: int = 0

    def block(self, read, lo, hi, xp):
        i = xp.arange(lo[0], hi[0], dtype=np.float64 if np.dtype(self.dtype).kind in "fc" else np.int64)
        out = (i * self.step + self.start).astype(self.dtype)
        if self.last is not None and hi[0] == self.n:
            out[-1] = self.last
        return out


def _diagonals(lo, hi, xp):
    """For a block of the last two axes: column index minus row index of every element."""
    return xp.arange(lo[-1], hi[-1])[None, :] - xp.arange(lo[-2], hi[-2])[:, None]


@dataclass
class Eye:
    k: int
    dtype: object

    def block(self, read, lo, hi, xp):
        return (_diagonals(lo, hi, xp) == self.k).astype(self.dtype)


@dataclass
class Triangle:
    """The input with the elements above (``upper``: below) diagonal ``k`` zeroed."""

    k: int
    upper: bool

    def block(self, read, lo, hi, xp):
        x = read(0, lo, hi)
        d = _diagonals(lo, hi, xp)
        keep = (d >= self.k) if self.upper else (d <= self.k)
        return xp.where(keep, x, xp.zeros((), dtype=x.dtype))


@dataclass
class Grid:
    """One output of meshgrid: a 1-d input spread along output axis ``axis``."""

    axis: int

    def block(self, read, lo, hi, xp):
        v = read(0, [lo[self.axis]], [hi[self.axis]])
        shape = [1] * len(lo)
        shape[self.axis] = hi[self.axis] - lo[self.axis]
        return xp.broadcast_to(v.reshape(shape), [h - l for l, h in zip(lo, hi)])
