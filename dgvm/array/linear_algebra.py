"""Linear algebra functions of the main namespace: ``matmul``/``@``, ``matrix_transpose``,
``tensordot``, ``vecdot``, and NumPy's ``dot``, ``outer``, ``diag``, ``diagonal``, ``trace``.

The matrix product is blocked by output chunk (``_engine.matrix_ops.MatMul``): the worker
that holds output block (i, j) multiplies row panel i of ``x1`` by column panel j of
``x2``, reading the blocks it lacks through the migration layer. ``diagonal`` and
``trace`` read only the blocks the diagonal crosses. The standard's ``linalg`` extension
is ``dgvm.array.linalg``.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise, per_matrix
from dgvm.array._engine.aliases import derived, stand_in
from dgvm.array._engine.apply import apply
from dgvm.array._engine.axes import broadcast_region, normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.dtypes import result_type
from dgvm.array._engine.matrix_ops import Diag, Diagonal, MatMul, input_coords
from dgvm.array._engine.placement import result_like
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.manipulation import expand_dims, permute_dims, reshape, reshaped, squeeze
from dgvm.array.statistical import sum as total_of

__all__ = ["diag", "diagonal", "dot", "matmul", "matrix_transpose", "outer", "tensordot", "trace", "vecdot"]


@empty_aware
def matmul(x1, x2, /):
    """Matrix product with NumPy's rules for 1-d operands and broadcast batch axes."""
    if not isinstance(x1, ArrayCore) or not isinstance(x2, ArrayCore):
        raise TypeError("matmul needs two DArrays")
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul does not take 0-d arrays; use multiply")
    drop = []
    if x1.ndim == 1:
        x1 = expand_dims(x1, axis=0)
        drop.append(-2)
    if x2.ndim == 1:
        x2 = expand_dims(x2, axis=1)
        drop.append(-1)
    if x1.shape[-1] != x2.shape[-2]:
        raise ValueError(f"matmul: shapes {x1.shape} and {x2.shape} do not align ({x1.shape[-1]} != {x2.shape[-2]})")
    try:
        batch = tuple(np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except ValueError:
        raise ValueError(f"matmul: batch shapes of {x1.shape} and {x2.shape} do not broadcast") from None
    dtype = result_type(x1, x2)
    shape = batch + (x1.shape[-2], x2.shape[-1])
    chunks = per_matrix.stack_chunks([x1, x2], [2, 2], batch) + (x1.chunks[-2], x2.chunks[-1])
    edges = sorted(set(np.cumsum((0,) + x1.chunks[-1]).tolist()) | set(np.cumsum((0,) + x2.chunks[-2]).tolist()))
    out = result_like(x1, shape, dtype, chunks,
                      lambda lo: broadcast_region(x1.shape[:-2], lo[:len(batch)], lo[:len(batch)])[0] + [lo[-2], 0])
    blockwise.run(MatMul(x1.shape, x2.shape, tuple(int(e) for e in edges), dtype), out, [x1, x2], "matmul")
    return squeeze(out, axis=tuple(drop)) if drop else out


@empty_aware
def matrix_transpose(x, /):
    """Transpose of the last two axes (a view: no copy)."""
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose needs at least 2 dimensions, got {x.ndim}")
    axes = list(range(x.ndim))
    axes[-2], axes[-1] = axes[-1], axes[-2]
    return permute_dims(x, axes)


@empty_aware
def tensordot(x1, x2, /, *, axes=2):
    """Sum of products over ``axes`` (an int: the last of x1 with the first of x2)."""
    if isinstance(axes, int):
        a1 = list(range(x1.ndim - axes, x1.ndim))
        a2 = list(range(axes))
    else:
        a1, a2 = ([axes[0]] if isinstance(axes[0], int) else list(axes[0]),
                  [axes[1]] if isinstance(axes[1], int) else list(axes[1]))
    a1 = list(normalize_axis(tuple(a1), x1.ndim, sort=False))
    a2 = list(normalize_axis(tuple(a2), x2.ndim, sort=False))
    if len(a1) != len(a2):
        raise ValueError(f"tensordot: {len(a1)} axes of x1 against {len(a2)} axes of x2")
    for i, j in zip(a1, a2):
        if x1.shape[i] != x2.shape[j]:
            raise ValueError(f"tensordot: axis {i} of x1 ({x1.shape[i]}) and axis {j} of x2 ({x2.shape[j]}) differ")
    free1 = [a for a in range(x1.ndim) if a not in a1]
    free2 = [a for a in range(x2.ndim) if a not in a2]
    m = int(np.prod([x1.shape[a] for a in free1], dtype=np.int64))
    n = int(np.prod([x2.shape[a] for a in free2], dtype=np.int64))
    k = int(np.prod([x1.shape[a] for a in a1], dtype=np.int64))
    # permute_dims copies even in the identity order: skipped then
    left = reshaped(x1 if free1 + a1 == list(range(x1.ndim)) else permute_dims(x1, free1 + a1), (m, k))
    right = reshaped(x2 if a2 + free2 == list(range(x2.ndim)) else permute_dims(x2, a2 + free2), (k, n))
    out = matmul(left, right)
    return reshaped(out, tuple(x1.shape[a] for a in free1) + tuple(x2.shape[a] for a in free2))


@empty_aware
def vecdot(x1, x2, /, *, axis=-1):
    """Dot product of vectors along ``axis`` (complex: the first is conjugated)."""
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: axis {axis} has {x1.shape[axis]} and {x2.shape[axis]} elements")
    a = apply("conj", x1) if x1.dtype.kind == "c" else x1
    prod = apply("multiply", a, x2)
    return total_of(prod, axis=axis, dtype=prod.dtype)  # the inputs' promoted type, as NumPy's


@empty_aware
def dot(a, b, /):
    """NumPy's ``dot``: vectors -> inner product, matrices -> matmul, else tensordot over
    the last axis of ``a`` and the second-to-last of ``b``."""
    if a.ndim == 1 and b.ndim == 1:
        prod = apply("multiply", a, b)
        return total_of(prod, dtype=prod.dtype)
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [max(b.ndim - 2, 0)]))


@empty_aware
def outer(x1, x2, /):
    """Outer product of two 1-d arrays."""
    return apply("multiply", reshape(x1, (-1, 1)), reshape(x2, (1, -1)))


# -- NumPy's diagonal functions (with axis1 and axis2) ----------------------------------------
def _axes(a, axis1, axis2, name: str) -> tuple:
    if not isinstance(a, ArrayCore):
        raise TypeError(f"{name} needs a DArray, not {type(a).__name__}")
    if a.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions; got shape {a.shape}")
    return normalize_axis((axis1, axis2), a.ndim, sort=False)  # AxisError, or repeated


def diagonal_of(x, offset: int, axes: tuple):
    """Diagonal ``offset`` of the matrices in ``axes`` (two distinct non-negative axes
    of x, rows first), as the result's last axis; NumPy's ``diagonal``. Only the blocks
    the diagonal crosses are read."""
    m, n = (x.shape[a] for a in axes)
    r0, c0 = max(0, -offset), max(0, offset)
    k = max(0, min(m - r0, n - c0))
    rows, cols = (np.cumsum((0,) + x.chunks[a]).tolist() for a in axes)
    edges = sorted({0, k} | {e - r0 for e in rows if 0 < e - r0 < k} | {e - c0 for e in cols if 0 < e - c0 < k})
    rest = [a for a in range(x.ndim) if a not in axes]
    chunks = tuple(x.chunks[a] for a in rest) + (tuple(b - a for a, b in zip(edges[:-1], edges[1:])) or (0,),)
    out = result_like(x, tuple(x.shape[a] for a in rest) + (k,), x.dtype, chunks,
                      lambda lo: input_coords(lo[:-1], axes, r0 + lo[-1], c0 + lo[-1]))
    blockwise.run(Diagonal(int(offset), tuple(axes)), out, [x], "diagonal")
    return out


@empty_aware
def diagonal(a, offset=0, axis1=0, axis2=1):
    """NumPy's ``diagonal``: diagonal ``offset`` of the matrices in axes ``axis1`` and
    ``axis2``, as the last axis of the result: a read-only view, as NumPy's."""
    axes = _axes(a, axis1, axis2, "diagonal")
    return diagonal_view(a, offset, axes)


def diagonal_view(a, offset: int, axes: tuple):
    """``diagonal_of`` as a read-only view of ``a`` (its values those of ``a`` when read)."""
    layout = np.diagonal(stand_in(a), offset, *axes)
    return derived(a, lambda s: diagonal_of(s, offset, axes), readonly=True, layout=layout)


@empty_aware
def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """NumPy's ``trace``: sums along diagonal ``offset`` of axes ``axis1`` and ``axis2``."""
    return total_of(diagonal_of(a, offset, _axes(a, axis1, axis2, "trace")), axis=-1, dtype=dtype)


@empty_aware
def diag(v, k=0):
    """NumPy's ``diag``: a 1-d ``v`` becomes a square matrix with ``v`` on diagonal
    ``k`` (its chunks follow ``v``'s along both axes); a 2-d ``v`` gives its diagonal."""
    if not isinstance(v, ArrayCore):
        raise TypeError(f"diag needs a DArray, not {type(v).__name__}")
    if v.ndim == 2:
        return diagonal(v, offset=k)
    if v.ndim != 1:
        raise ValueError(f"diag needs a 1-d or 2-d array; got shape {v.shape}")
    n = v.shape[0] + abs(k)
    side = v.chunks[0] + ((abs(k),) if k else ())
    out = type(v).allocated((n, n), v.dtype, (side, side))  # zero-filled: Diag writes the diagonal only
    blockwise.run(Diag(int(k), v.dtype), out, [v], "diag")
    return out
