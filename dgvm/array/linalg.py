"""The standard's ``linalg`` extension: ``dgvm.array.linalg``.

Norms, ``diagonal`` and ``trace`` of the last two axes, ``cross`` and ``matrix_power``
(elementwise operations and distributed products), and the products of the main
namespace (``matmul``, ``tensordot``, ...: ``dgvm.array.linear_algebra``). Factorizations,
inverses and solves run once per matrix where the whole matrix is read
(``_engine.per_matrix``, bodies in ``_engine.matrix_bodies``).
"""

from __future__ import annotations

import builtins
import functools
from typing import NamedTuple

import numpy as np

from dgvm.array._engine import matrix_bodies, per_matrix
from dgvm.array._engine.apply import apply
from dgvm.array._engine.axes import normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.creation import eye
from dgvm.array.linear_algebra import diagonal_view, dot, matmul, matrix_transpose, outer, tensordot, vecdot
from dgvm.array.manipulation import broadcast_to, expand_dims, permute_dims, reshape, stack
from dgvm.array.statistical import max as max_of, min as min_of, sum as total_of
from dgvm.protocol.errors import NotSupported

__all__ = [
    "EighResult", "QRResult", "SVDResult", "SlogdetResult", "cholesky", "cross", "det", "diagonal",
    "dot", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm", "matrix_power", "matrix_rank",
    "matrix_transpose", "norm", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals",
    "tensordot", "trace", "vecdot", "vector_norm",
]


@empty_aware(numpy=np.linalg)
def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002
    """p-norm of vectors (``axis`` None: of all elements)."""
    a = apply("abs", x)
    if ord == np.inf:
        return max_of(a, axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return min_of(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return total_of(apply("astype", apply("not_equal", x, 0), dtype=a.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return total_of(a, axis=axis, keepdims=keepdims)
    if ord == 2:
        return apply("sqrt", total_of(apply("multiply", a, a), axis=axis, keepdims=keepdims))
    p = float(ord)
    return apply("pow", total_of(apply("pow", a, p), axis=axis, keepdims=keepdims), 1.0 / p)


@empty_aware(numpy=np.linalg)
def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002
    """Frobenius, nuclear, 1, -1, 2, -2, inf or -inf norm of the matrices in the last two
    axes (2, -2 and nuclear from the singular values: ``svdvals``)."""
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims)
    if ord in (1, -1, np.inf, -np.inf):
        a = apply("abs", x)
        inner = -2 if ord in (1, -1) else -1
        s = total_of(a, axis=inner, keepdims=True)
        pick = max_of if ord in (1, np.inf) else min_of
        out = pick(s, axis=(-1 if inner == -2 else -2), keepdims=True)
        return out if keepdims else reshape(out, x.shape[:-2])
    if ord in (2, -2, "nuc"):
        s = svdvals(x)
        out = {2: max_of, -2: min_of, "nuc": total_of}[ord](s, axis=-1)
        return reshape(out, x.shape[:-2] + (1, 1)) if keepdims else out
    raise ValueError(f"matrix_norm: ord={ord!r} is not one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf")


@empty_aware(numpy=np.linalg)
def norm(x, /, ord=None, axis=None, keepdims=False):  # noqa: A002
    """NumPy's ``linalg.norm``: vector norms, and matrix norms for 2 axes."""
    if axis is None and x.ndim == 2 and ord is not None:
        return matrix_norm(x, keepdims=keepdims, ord=ord)
    if isinstance(axis, tuple) and len(axis) == 2:
        axes = normalize_axis(axis, x.ndim)
        moved = permute_dims(x, [a for a in range(x.ndim) if a not in axes] + list(axes))
        out = matrix_norm(moved, keepdims=False, ord="fro" if ord is None else ord)
        if keepdims:
            for a in axes:
                out = expand_dims(out, axis=a)
        return out
    return vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)


# -- diagonals, cross products, powers ---------------------------------------------------
@empty_aware(numpy=np.linalg)
def diagonal(x, /, *, offset=0):
    """Diagonal ``offset`` (above the main one when positive) of the matrices in the
    last two axes."""
    per_matrix.check_matrices("diagonal", x)
    return diagonal_view(x, offset, (x.ndim - 2, x.ndim - 1))


@empty_aware(numpy=np.linalg)
def trace(x, /, *, offset=0, dtype=None):
    """Sum along diagonal ``offset`` of the matrices in the last two axes (``dtype`` as
    for ``sum``)."""
    per_matrix.check_matrices("trace", x)
    return total_of(diagonal(x, offset=offset), axis=-1, dtype=dtype)


@empty_aware(numpy=np.linalg)
def cross(x1, x2, /, *, axis=-1):
    """Cross product of the 3-vectors along ``axis`` (broadcasting the other axes)."""
    if not isinstance(x1, ArrayCore) or not isinstance(x2, ArrayCore):
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


@empty_aware(numpy=np.linalg)
def matrix_power(x, n, /):
    """``x`` multiplied by itself ``n`` times (n < 0: of its inverse; 0: identities), by
    repeated squaring with distributed products."""
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


# -- factorizations, run once per matrix ----------------------------------------------
class EighResult(NamedTuple):
    eigenvalues: ArrayCore
    eigenvectors: ArrayCore


class QRResult(NamedTuple):
    Q: ArrayCore
    R: ArrayCore


class SlogdetResult(NamedTuple):
    sign: ArrayCore
    logabsdet: ArrayCore


class SVDResult(NamedTuple):
    U: ArrayCore
    S: ArrayCore
    Vh: ArrayCore


def _matrices(name, x, square=True):
    per_matrix.check_matrices(name, x, square=square)
    return per_matrix.float_dtype(x)


def _one(fn, x, tail, dtype, compute, name):
    return per_matrix.run(fn, [(x, 2)], [tail], [dtype], compute, name)[0]


@empty_aware(numpy=np.linalg)
def cholesky(x, /, *, upper=False):
    """Cholesky factor of each Hermitian positive-definite matrix: lower (``L @ L^H``),
    or upper (``U^H @ U``). A matrix that is not positive definite raises NumPy's
    ``LinAlgError`` on ``cpu``; cuSOLVER gives NaNs, as CuPy does."""
    t = _matrices("cholesky", x)
    return _one(functools.partial(matrix_bodies.cholesky, bool(upper)), x, x.shape[-2:], t, t, "cholesky")


@empty_aware(numpy=np.linalg)
def det(x, /):
    """Determinant of each matrix."""
    t = _matrices("det", x)
    return _one(matrix_bodies.det, x, (), t, t, "det")


@empty_aware(numpy=np.linalg)
def eigh(x, /) -> EighResult:
    """Eigenvalues (ascending, real) and eigenvectors (columns) of each Hermitian
    matrix, from its lower triangle."""
    t = _matrices("eigh", x)
    n = x.shape[-1]
    return EighResult(*per_matrix.run(matrix_bodies.eigh, [(x, 2)], [(n,), (n, n)], [per_matrix.real_dtype(t), t], t, "eigh"))


@empty_aware(numpy=np.linalg)
def eigvalsh(x, /):
    """Eigenvalues (ascending, real) of each Hermitian matrix, from its lower triangle."""
    t = _matrices("eigvalsh", x)
    return _one(matrix_bodies.eigvalsh, x, x.shape[-1:], per_matrix.real_dtype(t), t, "eigvalsh")


@empty_aware(numpy=np.linalg)
def inv(x, /):
    """Inverse of each matrix (a singular one raises NumPy's ``LinAlgError`` on ``cpu``)."""
    t = _matrices("inv", x)
    return _one(matrix_bodies.inv, x, x.shape[-2:], t, t, "inv")


@empty_aware(numpy=np.linalg)
def qr(x, /, *, mode="reduced") -> QRResult:
    """QR factorization of each matrix: ``mode`` 'reduced' (Q is M x K, R is K x N,
    K = min(M, N)) or 'complete' (Q is M x M, R is M x N)."""
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', not {mode!r}")
    t = _matrices("qr", x, square=False)
    m, n = x.shape[-2:]
    k = m if mode == "complete" else builtins.min(m, n)
    return QRResult(*per_matrix.run(functools.partial(matrix_bodies.qr, mode), [(x, 2)], [(m, k), (k, n)], [t, t], t, "qr"))


@empty_aware(numpy=np.linalg)
def slogdet(x, /) -> SlogdetResult:
    """Sign (a unit complex number for complex input) and natural log of the absolute
    value of the determinant of each matrix."""
    t = _matrices("slogdet", x)
    return SlogdetResult(*per_matrix.run(matrix_bodies.slogdet, [(x, 2)], [(), ()], [t, per_matrix.real_dtype(t)], t, "slogdet"))


@empty_aware(numpy=np.linalg)
def solve(x1, x2, /):
    """Solution ``y`` of ``x1 @ y = x2`` for each square matrix of ``x1``. ``x2`` is a
    vector when it is 1-d, else a stack of matrices (NumPy 2's rule); stacks broadcast."""
    per_matrix.check_matrices("solve", x1, square=True)
    if not isinstance(x2, ArrayCore):
        raise TypeError(f"linalg.solve needs DArrays, not {type(x2).__name__}")
    vector = x2.ndim == 1
    m = x1.shape[-1]
    if x2.ndim == 0 or x2.shape[-1 if vector else -2] != m:
        raise ValueError(f"linalg.solve: {x1.shape} matrices and right-hand sides of shape {x2.shape} do not align")
    t = per_matrix.float_dtype(x1, x2)
    tail = (m,) if vector else (m, x2.shape[-1])
    return per_matrix.run(functools.partial(matrix_bodies.solve, vector), [(x1, 2), (x2, 1 if vector else 2)],
                          [tail], [t], t, "solve")[0]


@empty_aware(numpy=np.linalg)
def svd(x, /, full_matrices=True, compute_uv=True, hermitian=False) -> SVDResult:
    """Singular value decomposition ``U @ diag(S) @ Vh`` of each matrix, singular values
    descending (``full_matrices``: U is M x M and Vh N x N, else M x K and K x N), with
    NumPy's positional arguments: ``compute_uv=False`` gives the singular values alone
    (``svdvals``). NumPy's ``hermitian=True`` (factors from ``eigh``, other signs) is
    not offered."""
    if hermitian:
        raise NotSupported("linalg.svd(hermitian=True) is not supported by dgvm.array; "
                           "the general svd (hermitian=False) factors Hermitian matrices too")
    if not compute_uv:
        return svdvals(x)
    t = _matrices("svd", x, square=False)
    m, n = x.shape[-2:]
    k = builtins.min(m, n)
    tails = [(m, m), (k,), (n, n)] if full_matrices else [(m, k), (k,), (k, n)]
    return SVDResult(*per_matrix.run(functools.partial(matrix_bodies.svd, bool(full_matrices)), [(x, 2)], tails,
                                     [t, per_matrix.real_dtype(t), t], t, "svd"))


@empty_aware(numpy=np.linalg)
def svdvals(x, /):
    """Singular values of each matrix, descending."""
    t = _matrices("svdvals", x, square=False)
    return _one(matrix_bodies.svdvals, x, (builtins.min(*x.shape[-2:]),), per_matrix.real_dtype(t), t, "svdvals")


def _default_rtol(x, t):
    return builtins.max(x.shape[-2:]) * float(np.finfo(per_matrix.real_dtype(t)).eps)


def _per_matrix_rtol(rtol, x):
    """A host array of rtols (one per matrix, as NumPy takes) as a DArray beside x."""
    if rtol is None or isinstance(rtol, ArrayCore) or np.ndim(rtol) == 0:
        return rtol

    return type(x).from_host(np.asarray(rtol), client=x.client)


@empty_aware(numpy=np.linalg)
def pinv(x, /, *, rtol=None):
    """Moore-Penrose pseudo-inverse of each matrix: singular values up to ``rtol`` times
    the largest are taken as zero (default: max(M, N) * eps; a DArray gives one per
    matrix)."""
    t = _matrices("pinv", x, square=False)
    tail = x.shape[-2:][::-1]
    rtol = _per_matrix_rtol(rtol, x)
    if isinstance(rtol, ArrayCore):
        return per_matrix.run(functools.partial(matrix_bodies.pinv, None), [(x, 2), (rtol, 0)], [tail], [t], t, "pinv")[0]
    r = _default_rtol(x, t) if rtol is None else float(rtol)
    return _one(functools.partial(matrix_bodies.pinv, r), x, tail, t, t, "pinv")


@empty_aware(numpy=np.linalg)
def matrix_rank(x, /, *, rtol=None):
    """Number of singular values of each matrix above ``rtol`` times the largest (default
    max(M, N) * eps; a DArray gives one per matrix). One task per worker: the singular
    values are counted where they are computed, never stored."""
    t = _matrices("matrix_rank", x, square=False)
    rtol = _per_matrix_rtol(rtol, x)
    if isinstance(rtol, ArrayCore):
        return per_matrix.run(functools.partial(matrix_bodies.matrix_rank, None, True), [(x, 2), (rtol, 0)], [()], [np.int64],
                              t, "matrix_rank")[0]
    r = _default_rtol(x, t) if rtol is None else float(rtol)
    return _one(functools.partial(matrix_bodies.matrix_rank, r, rtol is not None), x, (), np.int64, t, "matrix_rank")
