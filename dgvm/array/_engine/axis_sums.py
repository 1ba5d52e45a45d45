"""A chunk's sum over its leading axes, as one matrix-vector product on cuda.

CuPy sums the slow (leading, in memory) axes of an array with a reduction kernel that
reads a 10000 x 10000 float64 chunk at 2.5 TB/s on an H200, a 40000 x 1000 one at
0.3 TB/s, and float32 at half those; cuBLAS's matrix-vector product ``ones @ a`` reads the
same chunks at 3.8-4.2 TB/s (2.9 for the narrow one), the device's streaming rate
(``benchmarks/axis_sums.py`` prints both). So on cuda a chunk viewed as an (m, n) matrix,
the m rows to be added, is summed as ``ones(m) @ a``: ``x.sum(axis=0)``, ``x.mean(axis=0)``
and ``var``'s first pass of a C-ordered array, the trailing axes of an F-ordered one.

Only where it is the same sum: floating and complex dtypes summed in their own dtype
(a product by one is exact and NaN and infinities pass through; integers and booleans
have no BLAS product), whole contiguous chunks (a strided view would be copied first),
and dimensions within BLAS's 32-bit sizes. The order of the additions differs from
NumPy's, as CuPy's own does.
"""

from __future__ import annotations

import math
import threading

import numpy as np

DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))
BLAS_MAX = 2**31 - 1  # (cuBLAS takes its sizes as 32-bit ints)
# Rows up to which the vector of ones is kept per device and dtype (at most 1 MiB each):
# made once, not allocated and filled by a kernel of its own for every chunk.
KEPT_ONES = 1 << 16
_ones: dict = {}
_ones_lock = threading.Lock()


def sums(chunk, axes: tuple, dtype, xp):
    """NumPy's ``sum(chunk, axis=axes, keepdims=True, dtype=dtype)``, of a chunk of
    ``xp`` (NumPy or CuPy): on CuPy a matrix-vector product where ``rows`` allows."""
    if getattr(xp, "__name__", "") == "cupy":
        view = rows(chunk, axes, dtype)
        if view is not None:
            return by_product(chunk, axes, *view, xp)
    return xp.sum(chunk, axis=axes, keepdims=True, dtype=dtype)


def rows(chunk, axes: tuple, dtype):
    """(``chunk`` as an (m, n) matrix whose m rows sum to the reduction over ``axes``, a
    view; whether that matrix is of ``chunk.T``), or None where that is not the same sum
    or not a view."""
    if chunk.dtype not in DTYPES or (dtype is not None and np.dtype(dtype) != chunk.dtype):
        return None
    nd, k = chunk.ndim, len(axes)
    if k == 0 or k == nd or chunk.size == 0:
        return None  # (nothing to reduce; a whole reduction CuPy already streams)
    axes = sorted(axes)
    if chunk.flags.c_contiguous and axes == list(range(k)):
        a, flipped = chunk, False
    elif chunk.flags.f_contiguous and axes == list(range(nd - k, nd)):
        a, flipped = chunk.T, True  # C-ordered, the reduced axes first
    else:
        return None
    m = math.prod(a.shape[:k])
    n = a.size // m
    if m < 2 or max(m, n) > BLAS_MAX:
        return None
    return a.reshape(m, n), flipped


def by_product(chunk, axes: tuple, matrix, flipped: bool, xp):
    """The sum of ``matrix``'s rows (``rows(chunk, axes, ...)``), shaped as ``chunk``'s
    keepdims reduction over ``axes``."""
    total = ones(matrix.shape[0], matrix.dtype, xp) @ matrix
    kept = [s for i, s in enumerate(chunk.shape) if i not in axes]
    # (of chunk.T, the kept axes came out reversed)
    total = total.reshape(kept[::-1]).T if flipped else total.reshape(kept)
    return total.reshape([1 if i in axes else s for i, s in enumerate(chunk.shape)])


def ones(m: int, dtype, xp):
    """A vector of ``m`` ones of ``dtype`` of ``xp`` (on CuPy's current device: a view of
    the one kept for the device and dtype while ``m <= KEPT_ONES``)."""
    if m > KEPT_ONES or xp is np:
        return xp.ones(m, dtype=dtype)
    key = (xp.cuda.Device().id, np.dtype(dtype))
    with _ones_lock:
        kept = _ones.get(key)
        if kept is None:
            kept = xp.ones(KEPT_ONES, dtype=dtype)
            # (filled on this thread's stream: done before another stream reads it)
            xp.cuda.get_current_stream().synchronize()
            _ones[key] = kept
    return kept[:m]
