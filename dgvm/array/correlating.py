"""NumPy's covariance and correlation: ``cov`` and ``corrcoef``.

NumPy's own steps over DArrays: the variables' means (a reduction), their deviations
(an elementwise pass) and one distributed matrix product of the deviations with their
conjugate transpose (``matmul``); the weights' checks are reductions. The result, one
number per pair of variables, is a DArray; a single variable gives a 0-d one.
"""

from __future__ import annotations

import warnings

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.data_types import astype
from dgvm.array.elementwise import clip
from dgvm.array.linear_algebra import diag, matmul
from dgvm.array.manipulation import concat, permute_dims, reshape, squeeze
from dgvm.array.sorting import check_array
from dgvm.array.statistical import average, sum as total_of
from dgvm.array.utility import all as all_of, any as any_of

__all__ = ["corrcoef", "cov"]


def _rows(m, rowvar: bool, dtype):
    """``m`` as a 2-d array of ``dtype`` with one variable per row (NumPy's ``ndmin=2``)."""
    x = astype(m, dtype, copy=False)
    if x.ndim < 2:
        return reshape(x, (1, -1))
    return permute_dims(x, (1, 0)) if not rowvar else x


def _weights(w, nobs: int, name: str, like):
    """``fweights``/``aweights`` as a float64 DArray, checked as NumPy checks them."""
    if not isinstance(w, ArrayCore):
        w = type(like).from_host(np.asarray(w, dtype=float), client=like.client)
    w = astype(w, np.float64, copy=False)
    if w.ndim > 1:
        raise RuntimeError(f"dgvm.array.cov: cannot handle multidimensional {name}")
    if w.shape[0] != nobs:
        raise RuntimeError(f"dgvm.array.cov: incompatible numbers of samples ({nobs}) and "
                           f"{name} ({w.shape[0]})")
    if name == "fweights" and not all_of(apply("equal", w, apply("round", w))).host_value:
        raise TypeError("dgvm.array.cov: fweights must be integer")
    if any_of(apply("less", w, 0)).host_value:
        raise ValueError(f"dgvm.array.cov: {name} cannot be negative")
    return w


@empty_aware
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """NumPy's covariance matrix of the variables in the rows of ``m`` (columns when not
    ``rowvar``), and of ``y``'s after them; divided by ``N - ddof`` (``ddof``: 1, or 0
    with ``bias``), with frequency and analytic weights as NumPy's."""
    check_array(m, "cov")
    if ddof is not None and ddof != int(ddof):
        raise ValueError("dgvm.array.cov: ddof must be integer")
    if m.ndim > 2:
        raise ValueError(f"dgvm.array.cov: m has more than 2 dimensions (shape {m.shape})")
    if y is not None:
        check_array(y, "cov")
        if y.ndim > 2:
            raise ValueError(f"dgvm.array.cov: y has more than 2 dimensions (shape {y.shape})")
    if dtype is None:
        dtype = np.result_type(m.dtype, *([y.dtype] if y is not None else []), np.float64)
    x = _rows(m, rowvar or m.ndim == 1, dtype)
    if y is not None:
        y = _rows(y, rowvar or y.ndim < 2 or y.shape[0] == 1, dtype)
        if y.shape[1] != x.shape[1]:
            raise ValueError(f"dgvm.array.cov: m and y have {x.shape[1]} and {y.shape[1]} observations")
        x = concat([x, y], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        w = _weights(fweights, x.shape[1], "fweights", m)
    if aweights is not None:
        aweights = _weights(aweights, x.shape[1], "aweights", m)
        w = aweights if w is None else apply("multiply", w, aweights)
    avg, w_sum = average(x, 1, w, True)
    w_sum = w_sum.to_numpy()[0]
    if w is None:
        fact = x.shape[1] - ddof
    elif ddof == 0:
        fact = w_sum
    elif aweights is None:
        fact = w_sum - ddof
    else:
        fact = w_sum - ddof * total_of(apply("multiply", w, aweights)).to_numpy()[()] / w_sum
    if fact <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
        fact = 0.0
    x = astype(apply("subtract", x, reshape(avg, (-1, 1))), x.dtype)  # NumPy's in-place X -= avg
    xt = permute_dims(x if w is None else apply("multiply", x, w), (1, 0))
    c = matmul(x, apply("conj", xt))
    with np.errstate(all="ignore"):
        c = astype(apply("multiply", c, np.true_divide(1, fact)), c.dtype)  # NumPy's c *= 1 / fact
    ones = tuple(i for i, s in enumerate(c.shape) if s == 1)
    return squeeze(c, ones) if ones else c


@empty_aware
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """NumPy's Pearson correlation coefficients: ``cov`` divided by the product of the
    standard deviations, clipped to [-1, 1] (both parts, for complex values)."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return apply("divide", c, c)
    d = apply("real", diag(c))
    std = apply("sqrt", d)
    c = apply("divide", apply("divide", c, reshape(std, (-1, 1))), reshape(std, (1, -1)))
    if c.dtype.kind == "c":
        real, imag = clip(apply("real", c), -1, 1), clip(apply("imag", c), -1, 1)
        return apply("add", real, apply("multiply", 1j, imag))
    return clip(c, -1, 1)
