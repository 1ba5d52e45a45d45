"""Linear algebra: ``matmul``/``@``, ``tensordot``, ``vecdot``, ``dot``, ``outer``, norms,
and the standard's ``linalg`` extension.

The matrix product is blocked by output chunk: the worker that holds output block (i, j)
multiplies the blocks of row panel i of ``x1`` by those of column panel j of ``x2``,
reading them through the migration layer (replicas of the blocks it lacks, kept for the
next product), with CuPy's cuBLAS on GPUs and NumPy's BLAS on ``cpu``.

``diagonal`` and ``trace`` read only the blocks the diagonal crosses; ``cross`` and
``matrix_power`` are elementwise operations and products. Factorizations, inverses and
solves run once per matrix where the whole matrix is read (``dgvm.array._engine.per_matrix``).
"""

from __future__ import annotations

import builtins
import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from dgvm.array import diagonals
from dgvm.array._engine import blockwise, per_matrix
from dgvm.array.darray import DArray
from dgvm.array.elementwise import broadcast_region
from dgvm.array.manipulation import _empty, matrix_transpose, permute_dims, reshape  # noqa: F401
from dgvm.array.reductions import normalize_axis


@dataclass
class _MatMul:
    a_shape: tuple
    b_shape: tuple
    k_edges: tuple  # K cut where either operand's chunks are cut: every read is one chunk
    dtype: object

    def block(self, read, lo, hi, xp):
        nb = len(lo) - 2
        alo, ahi = broadcast_region(self.a_shape[:-2], lo[:nb], hi[:nb])
        blo, bhi = broadcast_region(self.b_shape[:-2], lo[:nb], hi[:nb])
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
    chunks = per_matrix.stack_chunks([x1, x2], [2, 2], batch) + (x1.chunks[-2], x2.chunks[-1])
    edges = sorted(set(np.cumsum((0,) + x1.chunks[-1]).tolist()) | set(np.cumsum((0,) + x2.chunks[-2]).tolist()))
    out = _empty(shape, dtype, chunks, x1,
                 lambda lo: broadcast_region(x1.shape[:-2], lo[:len(batch)], lo[:len(batch)])[0] + [lo[-2], 0])
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
    """Frobenius, nuclear, 1, -1, 2, -2, inf or -inf norm of the matrices in the last two
    axes (2, -2 and nuclear from the singular values: ``svdvals``)."""
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
    if ord in (2, -2, "nuc"):
        s = svdvals(x)
        out = {2: _max, -2: _min, "nuc": _sum}[ord](s, axis=-1)
        return reshape(out, x.shape[:-2] + (1, 1)) if keepdims else out
    raise ValueError(f"matrix_norm: ord={ord!r} is not one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf")


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


# -- the linalg extension: diagonals, cross products, powers ----------------------------
def diagonal(x, /, *, offset=0) -> DArray:
    """Diagonal ``offset`` (above the main one when positive) of the matrices in the
    last two axes."""
    per_matrix.check_matrices("diagonal", x)
    return diagonals.diagonal(x, offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None) -> DArray:
    """Sum along diagonal ``offset`` of the matrices in the last two axes (``dtype`` as
    for ``sum``)."""
    per_matrix.check_matrices("trace", x)
    return diagonals.trace(x, offset, -2, -1, dtype)


def cross(x1, x2, /, *, axis=-1) -> DArray:
    """Cross product of the 3-vectors along ``axis`` (broadcasting the other axes)."""
    from dgvm.array.elementwise import apply
    from dgvm.array.manipulation import stack

    if not isinstance(x1, DArray) or not isinstance(x2, DArray):
        raise TypeError(f"linalg.cross needs two DArrays, not {type(x1).__name__} and {type(x2).__name__}")
    ndim = builtins.max(x1.ndim, x2.ndim)
    if not -builtins.min(x1.ndim, x2.ndim) <= axis < 0:
        if not (x1.ndim == x2.ndim and 0 <= axis < ndim):
            raise ValueError(f"cross: axis {axis} is not an axis of both shapes {x1.shape} and {x2.shape}")
        axis -= ndim
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError(f"cross: axis {axis} must have 3 elements in both arrays; shapes {x1.shape} and {x2.shape}")
    after = (slice(None),) * (-axis - 1)
    a = [x1[(Ellipsis, i) + after] for i in range(3)]
    b = [x2[(Ellipsis, i) + after] for i in range(3)]

    def term(i, j):
        return apply("subtract", apply("multiply", a[i], b[j]), apply("multiply", a[j], b[i]))

    return stack([term(1, 2), term(2, 0), term(0, 1)], axis=axis)


def matrix_power(x, n, /) -> DArray:
    """``x`` multiplied by itself ``n`` times (n < 0: of its inverse; 0: identities), by
    repeated squaring with distributed products."""
    from dgvm.array.creation import eye
    from dgvm.array.manipulation import broadcast_to

    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"matrix_power: the exponent must be an integer, not {n!r}")
    per_matrix.check_matrices("matrix_power", x, square=True)
    if n == 0:
        return broadcast_to(eye(x.shape[-1], dtype=x.dtype, chunks=x.chunks[-2:]), x.shape)
    if n < 0:
        x, n = inv(x), -n
    result, base = None, x
    while True:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if not n:
            return result
        base = matmul(base, base)


# -- the linalg extension: factorizations, run once per matrix -------------------------
class EighResult(NamedTuple):
    eigenvalues: DArray
    eigenvectors: DArray


class QRResult(NamedTuple):
    Q: DArray
    R: DArray


class SlogdetResult(NamedTuple):
    sign: DArray
    logabsdet: DArray


class SVDResult(NamedTuple):
    U: DArray
    S: DArray
    Vh: DArray


def _matrices(name, x, square=True):
    per_matrix.check_matrices(name, x, square=square)
    return per_matrix.float_dtype(x)


def _one(fn, x, tail, dtype, compute, name):
    return per_matrix.run(fn, [(x, 2)], [tail], [dtype], compute, name)[0]


# The per-matrix bodies: (xp, *matrices) -> results. Module functions, so that a task
# carries them by name.
def _cholesky(upper, xp, a):
    low = xp.linalg.cholesky(a)
    return (xp.conj(xp.swapaxes(low, -1, -2)) if upper else low,)


def _det(xp, a):
    return (xp.linalg.det(a),)


def _eigh(xp, a):
    return tuple(xp.linalg.eigh(a))


def _eigvalsh(xp, a):
    return (xp.linalg.eigvalsh(a),)


def _inv(xp, a):
    return (xp.linalg.inv(a),)


def _qr(mode, xp, a):
    return tuple(xp.linalg.qr(a, mode=mode))


def _slogdet(xp, a):
    return tuple(xp.linalg.slogdet(a))


def _solve(vector, xp, a, b):
    # Both backends get an explicit stack of right-hand-side matrices: NumPy 2 and CuPy
    # read a batch of vectors differently.
    return (xp.linalg.solve(a, b[..., None])[..., 0] if vector else xp.linalg.solve(a, b),)


def _svd(full, xp, a):
    return tuple(xp.linalg.svd(a, full_matrices=full))


def _svdvals(xp, a):
    return (xp.linalg.svd(a, compute_uv=False),)


def _above_cut(s, rtol, rtol_array, wide: bool):
    """Which singular values ``s`` exceed ``rtol`` (or the per-matrix ``rtol_array``)
    times their matrix's largest. ``wide``: a number ``rtol`` cuts in float64, as NumPy's
    ``asarray(rtol)`` does (in float32 a value one ulp above the cut could fall below)."""
    top = s.max(axis=-1, keepdims=True)
    if rtol_array:
        return s > rtol_array[0][..., None] * top
    return s > rtol * (top.astype("float64") if wide else top)


def _matrix_rank(rtol, given: bool, xp, a, *rtol_array):
    s = xp.linalg.svd(a, compute_uv=False)
    # NumPy: a given rtol as a float64 array, the default one as a Python float.
    return (xp.count_nonzero(_above_cut(s, rtol, rtol_array, wide=given), axis=-1),)


def _pinv(rtol, xp, a, *rtol_array):
    u, s, vh = xp.linalg.svd(a, full_matrices=False)
    keep = _above_cut(s, rtol, rtol_array, wide=True)  # NumPy: asarray(rcond) either way
    s_inv = xp.where(keep, 1 / xp.where(keep, s, 1), 0).astype(s.dtype)
    adjoint = functools.partial(xp.swapaxes, axis1=-1, axis2=-2)
    return (xp.matmul(xp.conj(adjoint(vh)) * s_inv[..., None, :], xp.conj(adjoint(u))),)


def cholesky(x, /, *, upper=False) -> DArray:
    """Cholesky factor of each Hermitian positive-definite matrix: lower (``L @ L^H``),
    or upper (``U^H @ U``). A matrix that is not positive definite raises NumPy's
    ``LinAlgError`` on ``cpu``; cuSOLVER gives NaNs, as CuPy does."""
    t = _matrices("cholesky", x)
    return _one(functools.partial(_cholesky, bool(upper)), x, x.shape[-2:], t, t, "cholesky")


def det(x, /) -> DArray:
    """Determinant of each matrix."""
    t = _matrices("det", x)
    return _one(_det, x, (), t, t, "det")


def eigh(x, /) -> EighResult:
    """Eigenvalues (ascending, real) and eigenvectors (columns) of each Hermitian
    matrix, from its lower triangle."""
    t = _matrices("eigh", x)
    n = x.shape[-1]
    return EighResult(*per_matrix.run(_eigh, [(x, 2)], [(n,), (n, n)], [per_matrix.real_dtype(t), t], t, "eigh"))


def eigvalsh(x, /) -> DArray:
    """Eigenvalues (ascending, real) of each Hermitian matrix, from its lower triangle."""
    t = _matrices("eigvalsh", x)
    return _one(_eigvalsh, x, x.shape[-1:], per_matrix.real_dtype(t), t, "eigvalsh")


def inv(x, /) -> DArray:
    """Inverse of each matrix (a singular one raises NumPy's ``LinAlgError`` on ``cpu``)."""
    t = _matrices("inv", x)
    return _one(_inv, x, x.shape[-2:], t, t, "inv")


def qr(x, /, *, mode="reduced") -> QRResult:
    """QR factorization of each matrix: ``mode`` 'reduced' (Q is M x K, R is K x N,
    K = min(M, N)) or 'complete' (Q is M x M, R is M x N)."""
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', not {mode!r}")
    t = _matrices("qr", x, square=False)
    m, n = x.shape[-2:]
    k = m if mode == "complete" else builtins.min(m, n)
    return QRResult(*per_matrix.run(functools.partial(_qr, mode), [(x, 2)], [(m, k), (k, n)], [t, t], t, "qr"))


def slogdet(x, /) -> SlogdetResult:
    """Sign (a unit complex number for complex input) and natural log of the absolute
    value of the determinant of each matrix."""
    t = _matrices("slogdet", x)
    return SlogdetResult(*per_matrix.run(_slogdet, [(x, 2)], [(), ()], [t, per_matrix.real_dtype(t)], t, "slogdet"))


def solve(x1, x2, /) -> DArray:
    """Solution ``y`` of ``x1 @ y = x2`` for each square matrix of ``x1``. ``x2`` is a
    vector when it is 1-d, else a stack of matrices (NumPy 2's rule); stacks broadcast."""
    per_matrix.check_matrices("solve", x1, square=True)
    if not isinstance(x2, DArray):
        raise TypeError(f"linalg.solve needs DArrays, not {type(x2).__name__}")
    vector = x2.ndim == 1
    m = x1.shape[-1]
    if x2.ndim == 0 or x2.shape[-1 if vector else -2] != m:
        raise ValueError(f"linalg.solve: {x1.shape} matrices and right-hand sides of shape {x2.shape} do not align")
    t = per_matrix.float_dtype(x1, x2)
    tail = (m,) if vector else (m, x2.shape[-1])
    return per_matrix.run(functools.partial(_solve, vector), [(x1, 2), (x2, 1 if vector else 2)],
                          [tail], [t], t, "solve")[0]


def svd(x, /, *, full_matrices=True) -> SVDResult:
    """Singular value decomposition ``U @ diag(S) @ Vh`` of each matrix, singular values
    descending (``full_matrices``: U is M x M and Vh N x N, else M x K and K x N)."""
    t = _matrices("svd", x, square=False)
    m, n = x.shape[-2:]
    k = builtins.min(m, n)
    tails = [(m, m), (k,), (n, n)] if full_matrices else [(m, k), (k,), (k, n)]
    return SVDResult(*per_matrix.run(functools.partial(_svd, bool(full_matrices)), [(x, 2)], tails,
                                     [t, per_matrix.real_dtype(t), t], t, "svd"))


def svdvals(x, /) -> DArray:
    """Singular values of each matrix, descending."""
    t = _matrices("svdvals", x, square=False)
    return _one(_svdvals, x, (builtins.min(*x.shape[-2:]),), per_matrix.real_dtype(t), t, "svdvals")


def _default_rtol(x, t):
    return builtins.max(x.shape[-2:]) * float(np.finfo(per_matrix.real_dtype(t)).eps)


def _per_matrix_rtol(rtol, x):
    """A host array of rtols (one per matrix, as NumPy takes) as a DArray beside x."""
    if rtol is None or isinstance(rtol, DArray) or np.ndim(rtol) == 0:
        return rtol
    from dgvm.array.creation import from_numpy

    return from_numpy(np.asarray(rtol), client=x.client)


def pinv(x, /, *, rtol=None) -> DArray:
    """Moore-Penrose pseudo-inverse of each matrix: singular values up to ``rtol`` times
    the largest are taken as zero (default: max(M, N) * eps; a DArray gives one per
    matrix)."""
    t = _matrices("pinv", x, square=False)
    tail = x.shape[-2:][::-1]
    rtol = _per_matrix_rtol(rtol, x)
    if isinstance(rtol, DArray):
        return per_matrix.run(functools.partial(_pinv, None), [(x, 2), (rtol, 0)], [tail], [t], t, "pinv")[0]
    r = _default_rtol(x, t) if rtol is None else float(rtol)
    return _one(functools.partial(_pinv, r), x, tail, t, t, "pinv")


def matrix_rank(x, /, *, rtol=None) -> DArray:
    """Number of singular values of each matrix above ``rtol`` times the largest (default
    max(M, N) * eps; a DArray gives one per matrix). One task per worker: the singular
    values are counted where they are computed, never stored."""
    t = _matrices("matrix_rank", x, square=False)
    rtol = _per_matrix_rtol(rtol, x)
    if isinstance(rtol, DArray):
        return per_matrix.run(functools.partial(_matrix_rank, None, True), [(x, 2), (rtol, 0)], [()], [np.int64],
                              t, "matrix_rank")[0]
    r = _default_rtol(x, t) if rtol is None else float(rtol)
    return _one(functools.partial(_matrix_rank, r, rtol is not None), x, (), np.int64, t, "matrix_rank")
