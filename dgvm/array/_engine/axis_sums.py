"""A chunk's sum over its leading axes, as one matrix-vector product on cuda.

CuPy sums the slow (leading, in memory) axes of an array with a reduction kernel that
reads a 10000 x 10000 float64 chunk at 2.1-2.5 TB/s on an H200, a 40000 x 1000 one at
0.3 TB/s, float32 at 55-65% of those; cuBLAS's matrix-vector product ``ones @ a`` reads
the float64 chunks at 3.8-4.2 TB/s (2.9-3 for the narrow one) and the float32 ones at
2.5-3.9, about the device's streaming rate (``benchmarks/axis_sums.py`` prints both).
So on cuda a chunk (C-ordered, as every chunk is) viewed as an (m, n) matrix, the m rows
to be added, is summed as ``ones(m) @ a``: ``x.sum(axis=0)``, ``x.mean(axis=0)`` and
``var``'s first pass.

Only where it is the same sum: float32 and float64 summed in their own dtype (a product
by one is exact, and NaN and infinities pass through); complex ones as the float matrix
of their real and imaginary parts side by side (a complex product by one would turn
``inf + 0j`` into ``inf + nanj``); not integers and booleans (no BLAS product), nor
float32 where CuPy was told to multiply in TF32 (``CUPY_TF32``: its inputs rounded to 10
bits). Whole contiguous chunks only (a strided view would be copied first), within
BLAS's 32-bit sizes. The order of the additions differs from NumPy's, as CuPy's own does.

The vector of ones is kept per device and dtype up to ``KEPT_ONES`` rows (1 MiB at most
each); cuBLAS's handle for the task's thread and its workspace are made on a worker's
first such sum. Both are outside the chunk store's accounting, as CuPy's own are.
"""

from __future__ import annotations

import math
import threading

import numpy as np

DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))
BLAS_MAX = 2**31 - 1  # (cuBLAS takes its sizes as 32-bit ints)
KEPT_ONES = 1 << 16
_ones: dict = {}
_ones_lock = threading.Lock()


def sums(chunk, axes: tuple, dtype, xp):
    """NumPy's ``sum(chunk, axis=axes, keepdims=True, dtype=dtype)``, of a chunk of
    ``xp`` (NumPy or CuPy): on CuPy a matrix-vector product where ``rows`` allows."""
    if getattr(xp, "__name__", "") == "cupy":
        matrix = rows(chunk, axes, dtype)
        if matrix is not None and _exact_products(matrix.dtype):
            return by_product(chunk, axes, matrix, xp)
    return xp.sum(chunk, axis=axes, keepdims=True, dtype=dtype)


def rows(chunk, axes: tuple, dtype):
    """``chunk`` as a float (m, n) matrix whose m rows sum to the reduction over
    ``axes`` (a view; a complex chunk's real and imaginary parts side by side), or None
    where that is not the same sum or not a view."""
    if chunk.dtype not in DTYPES or (dtype is not None and np.dtype(dtype) != chunk.dtype):
        return None
    k = len(axes)
    if k == 0 or k == chunk.ndim or chunk.size == 0 or not chunk.flags.c_contiguous:
        return None  # (nothing to reduce; a whole reduction CuPy already streams)
    if sorted(axes) != list(range(k)):
        return None  # (a trailing axis: CuPy's reduction streams it)
    m = math.prod(chunk.shape[:k])
    matrix = chunk.reshape(m, chunk.size // m)
    if chunk.dtype.kind == "c":
        matrix = matrix.view(matrix.real.dtype)  # (m, 2n): re, im, re, im, ...
    if m < 2 or max(matrix.shape) > BLAS_MAX:
        return None
    return matrix


def by_product(chunk, axes: tuple, matrix, xp):
    """The sum of ``matrix``'s rows (``rows(chunk, axes, ...)``), shaped as ``chunk``'s
    keepdims reduction over ``axes``."""
    total = ones(matrix.shape[0], matrix.dtype, xp) @ matrix
    if chunk.dtype.kind == "c":
        total = total.view(chunk.dtype)
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


def _exact_products(dtype) -> bool:
    """Whether CuPy multiplies ``dtype`` matrices at their own precision (not TF32)."""
    if dtype != np.float32:
        return True
    try:
        from cupy._core import _routines_linalg as linalg  # (where CuPy keeps the setting)

        return linalg.get_compute_type(dtype) in (linalg.COMPUTE_TYPE_DEFAULT, linalg.COMPUTE_TYPE_PEDANTIC)
    except (ImportError, AttributeError):
        return False  # (a CuPy that does not say: its own reduction)
