"""NumPy's diagonal functions: ``diag``, ``diagonal`` and ``trace`` (with ``axis1`` and
``axis2``, where the standard's ``linalg.diagonal`` and ``linalg.trace`` take the last
two axes)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from dgvm.array import blockwise
from dgvm.array.darray import DArray


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
    from dgvm.array.linalg import diagonal_of

    return diagonal_of(a, offset, _axes(a, axis1, axis2, "diagonal"))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None) -> DArray:
    """NumPy's ``trace``: sums along diagonal ``offset`` of axes ``axis1`` and ``axis2``."""
    from dgvm.array.reductions import sum as _sum

    return _sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@dataclass
class _Diag:
    k: int
    dtype: object

    def block(self, read, lo, hi, xp):
        out = xp.zeros(tuple(h - l for l, h in zip(lo, hi)), dtype=self.dtype)
        r0, c0 = builtins.max(0, -self.k), builtins.max(0, self.k)
        # Element t of v sits at (r0 + t, c0 + t): the t whose place is in this block.
        t0 = builtins.max(lo[0] - r0, lo[1] - c0)
        t1 = builtins.min(hi[0] - r0, hi[1] - c0)
        if t0 < t1:
            t = xp.arange(t0, t1)
            out[t + r0 - lo[0], t + c0 - lo[1]] = read(0, [t0], [t1])
        return out


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
    out = empty((n, n), v.dtype, (side, side))
    blockwise.run(_Diag(int(k), v.dtype), out, [v], "diag")
    return out
