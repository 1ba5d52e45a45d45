"""Linear algebra: ``matmul``/``@``, ``tensordot``, ``vecdot``, ``dot``, ``outer``, norms.

The matrix product is blocked by output chunk: the worker that holds output block (i, j)
multiplies the blocks of row panel i of ``x1`` by those of column panel j of ``x2``,
reading them through the migration layer (replicas of the blocks it lacks, kept for the
next product), with CuPy's cuBLAS on GPUs and NumPy's BLAS on ``cpu``.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import numpy as np

from dgvm.array import blockwise
from dgvm.array.darray import DArray
from dgvm.array.manipulation import _empty, matrix_transpose, permute_dims, reshape  # noqa: F401
from dgvm.array.reductions import normalize_axis


def _batch_region(shape, nb: int, lo, hi):
    """Region of the batch axes of an input (right-aligned, broadcasting) for an output
    block with ``nb`` batch axes."""
    d = nb - (len(shape) - 2)
    blo = [0 if shape[j] == 1 else lo[j + d] for j in range(len(shape) - 2)]
    bhi = [1 if shape[j] == 1 else hi[j + d] for j in range(len(shape) - 2)]
    return blo, bhi


@dataclass
class _MatMul:
    a_shape: tuple
    b_shape: tuple
    k_edges: tuple  # K cut where either operand's chunks are cut: every read is one chunk
    dtype: object

    def block(self, read, lo, hi, xp):
        nb = len(lo) - 2
        alo, ahi = _batch_region(self.a_shape, nb, lo, hi)
        blo, bhi = _batch_region(self.b_shape, nb, lo, hi)
        acc = None
        for k0, k1 in zip(self.k_edges[:-1], self.k_edges[1:]):
            a = read(0, alo + [lo[-2], k0], ahi + [hi[-2], k1]).astype(self.dtype, copy=False)
            b = read(1, blo + [k0, lo[-1]], bhi + [k1, hi[-1]]).astype(self.dtype, copy=False)
            p = xp.matmul(a, b)
            if acc is None:
                acc = p
            else:
                acc += p
        return acc


def matmul(x1, x2, /) -> DArray:
    """Matrix product with NumPy's rules for 1-d operands and broadcast batch axes."""
    from dgvm.array.dtypes import result_type
    from dgvm.array.elementwise import out_chunks
    from dgvm.array.manipulation import expand_dims, squeeze

    if not isinstance(x1, DArray) or not isinstance(x2, DArray):
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
    chunks = out_chunks([x1, x2], batch, dtype) if batch else ()
    chunks = tuple(chunks) + (x1.chunks[-2], x2.chunks[-1])
    edges = sorted(set(np.cumsum((0,) + x1.chunks[-1]).tolist()) | set(np.cumsum((0,) + x2.chunks[-2]).tolist()))
    d = len(batch) - (x1.ndim - 2)
    out = _empty(shape, dtype, chunks, x1,
                 lambda lo: [0 if x1.shape[j] == 1 else lo[j + d] for j in range(x1.ndim - 2)] + [lo[-2], 0])
    blockwise.run(_MatMul(x1.shape, x2.shape, tuple(int(e) for e in edges), dtype), out, [x1, x2], "matmul")
    return squeeze(out, axis=tuple(drop)) if drop else out


def tensordot(x1, x2, /, *, axes=2) -> DArray:
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
    left = reshape(x1 if free1 + a1 == list(range(x1.ndim)) else permute_dims(x1, free1 + a1), (m, k))
    right = reshape(x2 if a2 + free2 == list(range(x2.ndim)) else permute_dims(x2, a2 + free2), (k, n))
    out = matmul(left, right)
    return reshape(out, tuple(x1.shape[a] for a in free1) + tuple(x2.shape[a] for a in free2))


def vecdot(x1, x2, /, *, axis=-1) -> DArray:
    """Dot product of vectors along ``axis`` (complex: the first is conjugated)."""
    from dgvm.array.elementwise import apply
    from dgvm.array.reductions import sum as _sum

    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: axis {axis} has {x1.shape[axis]} and {x2.shape[axis]} elements")
    a = apply("conj", x1) if x1.dtype.kind == "c" else x1
    prod = apply("multiply", a, x2)
    return _sum(prod, axis=axis, dtype=prod.dtype)  # the inputs' promoted type, as NumPy's


def dot(a, b, /) -> DArray:
    """NumPy's ``dot``: vectors -> inner product, matrices -> matmul, else tensordot over
    the last axis of ``a`` and the second-to-last of ``b``."""
    if a.ndim == 1 and b.ndim == 1:
        from dgvm.array.elementwise import apply
        from dgvm.array.reductions import sum as _sum

        prod = apply("multiply", a, b)
        return _sum(prod, dtype=prod.dtype)
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [builtins.max(b.ndim - 2, 0)]))


def outer(x1, x2, /) -> DArray:
    """Outer product of two 1-d arrays."""
    from dgvm.array.elementwise import apply

    return apply("multiply", reshape(x1, (-1, 1)), reshape(x2, (1, -1)))


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2) -> DArray:  # noqa: A002
    """p-norm of vectors (``axis`` None: of all elements)."""
    from dgvm.array.elementwise import apply
    from dgvm.array.reductions import max as _max, min as _min, sum as _sum

    a = apply("abs", x)
    if ord == np.inf:
        return _max(a, axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return _min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return _sum(apply("astype", apply("not_equal", x, 0), dtype=a.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _sum(a, axis=axis, keepdims=keepdims)
    if ord == 2:
        return apply("sqrt", _sum(apply("multiply", a, a), axis=axis, keepdims=keepdims))
    p = float(ord)
    return apply("pow", _sum(apply("pow", a, p), axis=axis, keepdims=keepdims), 1.0 / p)


def matrix_norm(x, /, *, keepdims=False, ord="fro") -> DArray:  # noqa: A002
    """Frobenius, 1, -1, inf or -inf norm of the matrices in the last two axes."""
    from dgvm.array.elementwise import apply
    from dgvm.array.reductions import max as _max, min as _min, sum as _sum

    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims)
    if ord in (1, -1, np.inf, -np.inf):
        a = apply("abs", x)
        inner = -2 if ord in (1, -1) else -1
        s = _sum(a, axis=inner, keepdims=True)
        pick = _max if ord in (1, np.inf) else _min
        out = pick(s, axis=(-1 if inner == -2 else -2), keepdims=True)
        return out if keepdims else reshape(out, x.shape[:-2])
    raise ValueError(
        f"matrix_norm ord={ord!r}: dgvm.array has 'fro', 1, -1, inf and -inf; the 2 and "
        "nuclear norms need a singular value decomposition, which it does not distribute"
    )


def norm(x, /, ord=None, axis=None, keepdims=False) -> DArray:  # noqa: A002
    """NumPy's ``linalg.norm``: vector norms, and matrix norms for 2 axes."""
    if axis is None and x.ndim == 2 and ord is not None:
        return matrix_norm(x, keepdims=keepdims, ord=ord)
    if isinstance(axis, tuple) and len(axis) == 2:
        axes = normalize_axis(axis, x.ndim)
        moved = permute_dims(x, [a for a in range(x.ndim) if a not in axes] + list(axes))
        out = matrix_norm(moved, keepdims=False, ord="fro" if ord is None else ord)
        if keepdims:
            from dgvm.array.manipulation import expand_dims

            for a in axes:
                out = expand_dims(out, axis=a)
        return out
    return vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)
