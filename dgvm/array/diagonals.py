"""NumPy's diagonal functions: ``diag``, ``diagonal`` and ``trace`` (with ``axis1`` and
``axis2``, where the standard's ``linalg.diagonal`` and ``linalg.trace`` take the last
two axes)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array.darray import DArray
from dgvm.array.manipulation import _empty


def _axes(a, axis1, axis2, name: str) -> tuple:
    from dgvm.array.reductions import normalize_axis

    if not isinstance(a, DArray):
        raise TypeError(f"{name} needs a DArray, not {type(a).__name__}")
    if a.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions; got shape {a.shape}")
    return normalize_axis((axis1, axis2), a.ndim, sort=False)  # AxisError, or repeated


def diagonal(a, offset=0, axis1=0, axis2=1) -> DArray:
    """NumPy's ``diagonal``: diagonal ``offset`` of the matrices in axes ``axis1`` and
    ``axis2``, as the last axis of the result (read where it lies: no copy of ``a``)."""
    return diagonal_of(a, offset, _axes(a, axis1, axis2, "diagonal"))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None) -> DArray:
    """NumPy's ``trace``: sums along diagonal ``offset`` of axes ``axis1`` and ``axis2``."""
    from dgvm.array.reductions import sum as _sum

    return _sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diagonal_of(x, offset: int, axes: tuple) -> DArray:
    """Diagonal ``offset`` of the matrices in ``axes`` (two distinct non-negative axes
    of x, rows first), as the result's last axis; NumPy's ``diagonal``. Only the blocks
    the diagonal crosses are read."""
    m, n = (x.shape[a] for a in axes)
    r0, c0 = builtins.max(0, -offset), builtins.max(0, offset)
    k = builtins.max(0, builtins.min(m - r0, n - c0))
    rows, cols = (np.cumsum((0,) + x.chunks[a]).tolist() for a in axes)
    edges = sorted({0, k} | {e - r0 for e in rows if 0 < e - r0 < k} | {e - c0 for e in cols if 0 < e - c0 < k})
    rest = [a for a in range(x.ndim) if a not in axes]
    chunks = tuple(x.chunks[a] for a in rest) + (tuple(b - a for a, b in zip(edges[:-1], edges[1:])) or (0,),)
    out = _empty(tuple(x.shape[a] for a in rest) + (k,), x.dtype, chunks, x,
                 lambda lo: _input_coords(lo[:-1], axes, r0 + lo[-1], c0 + lo[-1]))
    blockwise.run(_Diagonal(int(offset), tuple(axes)), out, [x], "diagonal")
    return out


@dataclass
class _Diagonal:
    offset: int
    axes: tuple  # the two axes of x the matrices are in

    def block(self, read, lo, hi, xp):
        r0, c0 = builtins.max(0, -self.offset), builtins.max(0, self.offset)
        # The output chunks are cut where the diagonal crosses a chunk edge of x: the
        # square read is one chunk's view (or one replica), never a gather.
        square_lo = _input_coords(lo[:-1], self.axes, r0 + lo[-1], c0 + lo[-1])
        square_hi = _input_coords(hi[:-1], self.axes, r0 + hi[-1], c0 + hi[-1])
        return xp.diagonal(read(0, square_lo, square_hi), axis1=self.axes[0], axis2=self.axes[1])


def _input_coords(rest, axes, row, col) -> list:
    """x's coordinates from the other axes' ``rest`` and a (row, col) in ``axes``."""
    out = list(rest)
    for a, v in sorted(zip(axes, (row, col))):
        out.insert(a, v)
    return out


@dataclass
class _Diag:
    k: int
    dtype: object

    def block(self, read, lo, hi, xp):
        out = xp.zeros(tuple(h - l for l, h in zip(lo, hi)), dtype=self.dtype)
        self.block_into(read, lo, hi, xp, out)
        return out

    def block_into(self, read, lo, hi, xp, target) -> bool:
        """Only the diagonal's elements: the rest of a new result is zero already (most
        blocks of the matrix hold none of them)."""
        r0, c0 = builtins.max(0, -self.k), builtins.max(0, self.k)
        # Element t of v sits at (r0 + t, c0 + t): the t whose place is in this block.
        t0 = builtins.max(lo[0] - r0, lo[1] - c0)
        t1 = builtins.min(hi[0] - r0, hi[1] - c0)
        if t0 < t1:
            t = xp.arange(t0, t1)
            target[t + r0 - lo[0], t + c0 - lo[1]] = read(0, [t0], [t1])
        return True


def diag(v, k=0) -> DArray:
    """NumPy's ``diag``: a 1-d ``v`` becomes a square matrix with ``v`` on diagonal
    ``k`` (its chunks follow ``v``'s along both axes); a 2-d ``v`` gives its diagonal."""
    from dgvm.array.creation import empty

    if not isinstance(v, DArray):
        raise TypeError(f"diag needs a DArray, not {type(v).__name__}")
    if v.ndim == 2:
        return diagonal(v, offset=k)
    if v.ndim != 1:
        raise ValueError(f"diag needs a 1-d or 2-d array; got shape {v.shape}")
    n = v.shape[0] + builtins.abs(k)
    side = v.chunks[0] + ((builtins.abs(k),) if k else ())
    out = empty((n, n), v.dtype, (side, side))  # zero-filled: _Diag writes the diagonal only
    blockwise.run(_Diag(int(k), v.dtype), out, [v], "diag")
    return out
