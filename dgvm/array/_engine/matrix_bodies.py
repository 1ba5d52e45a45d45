"""The bodies of the per-matrix functions (``per_matrix.run``): ``(xp, *items) -> results``.

Each runs on a worker, once per stack of whole matrices (NumPy's LAPACK on ``cpu``,
CuPy's cuSOLVER on GPUs). Module functions (``functools.partial`` of them for their
options), so that a task carries them by name.
"""

from __future__ import annotations

import functools


def cholesky(upper, xp, a):
    low = xp.linalg.cholesky(a)
    return (xp.conj(xp.swapaxes(low, -1, -2)) if upper else low,)


def det(xp, a):
    return (xp.linalg.det(a),)


def eigh(xp, a):
    return tuple(xp.linalg.eigh(a))


def eigvalsh(xp, a):
    return (xp.linalg.eigvalsh(a),)


def inv(xp, a):
    return (xp.linalg.inv(a),)


def qr(mode, xp, a):
    return tuple(xp.linalg.qr(a, mode=mode))


def slogdet(xp, a):
    return tuple(xp.linalg.slogdet(a))


def solve(vector, xp, a, b):
    # Both backends get an explicit stack of right-hand-side matrices: NumPy 2 and CuPy
    # read a batch of vectors differently.
    return (xp.linalg.solve(a, b[..., None])[..., 0] if vector else xp.linalg.solve(a, b),)


def svd(full, xp, a):
    return tuple(xp.linalg.svd(a, full_matrices=full))


def svdvals(xp, a):
    return (xp.linalg.svd(a, compute_uv=False),)


def _above_cut(s, rtol, rtol_array, wide: bool):
    """Which singular values ``s`` exceed ``rtol`` (or the per-matrix ``rtol_array``)
    times their matrix's largest. ``wide``: a number ``rtol`` cuts in float64, as NumPy's
    ``asarray(rtol)`` does (in float32 a value one ulp above the cut could fall below)."""
    top = s.max(axis=-1, keepdims=True)
    if rtol_array:
        return s > rtol_array[0][..., None] * top
    return s > rtol * (top.astype("float64") if wide else top)


def matrix_rank(rtol, given: bool, xp, a, *rtol_array):
    s = xp.linalg.svd(a, compute_uv=False)
    # NumPy: a given rtol as a float64 array, the default one as a Python float.
    return (xp.count_nonzero(_above_cut(s, rtol, rtol_array, wide=given), axis=-1),)


def pinv(rtol, xp, a, *rtol_array):
    u, s, vh = xp.linalg.svd(a, full_matrices=False)
    keep = _above_cut(s, rtol, rtol_array, wide=True)  # NumPy: asarray(rcond) either way
    s_inv = xp.where(keep, 1 / xp.where(keep, s, 1), 0).astype(s.dtype)
    adjoint = functools.partial(xp.swapaxes, axis1=-1, axis2=-2)
    return (xp.matmul(xp.conj(adjoint(vh)) * s_inv[..., None, :], xp.conj(adjoint(u))),)
