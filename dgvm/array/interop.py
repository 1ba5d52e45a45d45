"""NumPy interoperability: NumPy functions and ufuncs given a DArray run distributed.

``np.sum(x)``, ``np.exp(x)``, ``np.concatenate([x, y])`` ... dispatch to ``dgvm.array``
through ``DArray.__array_function__`` / ``__array_ufunc__`` (handed in by the package:
``_engine.namespace``). A NumPy function dgvm does not distribute raises a ``TypeError``
naming it: never a silent gather to one place (``dgvm.array.asnumpy(x)`` gathers on
purpose).
"""

from __future__ import annotations

import numpy as np

from dgvm.array import (
    correlating, creation, cumulative, data_types, elementwise, fft, histograms, indexing, linalg,
    linear_algebra, manipulation, order_statistics, searching, sets, sorting, statistical, utility,
)
from dgvm.array.array_object import DArray

# NumPy ufunc names that differ from the array API's.
_UFUNC_NAMES = {
    "arccos": "acos", "arccosh": "acosh", "arcsin": "asin", "arcsinh": "asinh",
    "arctan": "atan", "arctanh": "atanh", "arctan2": "atan2", "invert": "bitwise_invert",
    "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift", "power": "pow",
    "true_divide": "divide", "absolute": "abs", "conjugate": "conj", "mod": "remainder",
    "fmod": None,
}
# The functions of dgvm.array that NumPy has as ufuncs, by the array API's name.
_UFUNCS = {
    **{name: getattr(elementwise, name) for name in elementwise.__all__},
    "matmul": linear_algebra.matmul, "vecdot": linear_algebra.vecdot,
}
_REDUCE = {"add": statistical.sum, "multiply": statistical.prod, "maximum": statistical.max,
           "minimum": statistical.min, "logical_and": utility.all, "logical_or": utility.any}


def array_ufunc(ufunc, method, inputs, kwargs):
    if kwargs.get("out") is not None:
        raise TypeError(f"numpy.{ufunc.__name__}(..., out=) is not supported for DArrays; "
                        "assign the result instead")
    name = _UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__)
    if method == "__call__" and name in _UFUNCS and not kwargs:
        return _UFUNCS[name](*inputs)
    if method == "reduce" and ufunc.__name__ in _REDUCE and len(inputs) == 1:
        kw = {k: v for k, v in kwargs.items() if k in ("axis", "keepdims", "dtype")}
        kw.setdefault("axis", 0)
        if ufunc.__name__ not in ("add", "multiply"):
            kw.pop("dtype", None)
        return _REDUCE[ufunc.__name__](inputs[0], **kw)
    raise TypeError(
        f"numpy.{ufunc.__name__}.{method} with {sorted(kwargs) or 'these arguments'} is not "
        "distributed by dgvm.array; use the dgvm.array function, or dgvm.array.asnumpy(x) "
        "to gather on purpose"
    )


def _numpy_keywords(kwargs, ddof_to_correction=False):
    kw = dict(kwargs)
    if kw.pop("out", None) is not None:
        raise TypeError("out= is not supported for DArrays")
    if ddof_to_correction and "ddof" in kw:
        kw["correction"] = kw.pop("ddof")
    return kw


def _reduction(fn, ddof=False):
    def f(a, axis=None, *args, **kwargs):
        kw = _numpy_keywords(kwargs, ddof)
        if args:
            raise TypeError(f"numpy.{fn.__name__} positional arguments after axis are not supported for DArrays")
        return fn(a, axis=axis, **kw)

    return f


def _same(fn):
    """NumPy's function of this name is ``fn``."""
    def call(*args, **kwargs):
        return fn(*args, **_numpy_keywords(kwargs))
    return call


def _lower(fn, a, uplo):
    # dgvm's eigh reads the lower triangle, as the standard's does.
    return fn(a) if uplo == "L" else _unsupported(f"linalg.{fn.__name__}", "UPLO='U'")


def _unsupported(name, what):
    raise TypeError(f"numpy.{name} with {what}= is not distributed by dgvm.array")


def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if hermitian:
        return _unsupported("linalg.svd", "hermitian")
    return linalg.svd(a, full_matrices, compute_uv)


def _pinv(a, rcond=None, hermitian=False, *, rtol=None):
    if hermitian:
        return _unsupported("linalg.pinv", "hermitian")
    return linalg.pinv(a, rtol=rtol if rcond is None else rcond)


def _matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    if tol is not None:
        return _unsupported("linalg.matrix_rank", "tol")
    if hermitian:
        return _unsupported("linalg.matrix_rank", "hermitian")
    return linalg.matrix_rank(A, rtol=rtol)


def _round(a, decimals, name):
    return elementwise.round(a) if decimals == 0 else _unsupported(name, "decimals")


def _fft_1d(fn):
    """NumPy's 1-d transform of ``fn``'s name: n, axis and norm positional too."""
    def call(a, n=None, axis=-1, norm=None, out=None):
        _numpy_keywords({"out": out})
        return fn(a, n=n, axis=axis, norm=norm)
    return call


def _fft_nd(fn, default_axes=None):
    """NumPy's n-d transform (``fft2``'s family: the last two axes by default)."""
    def call(a, s=None, axes=default_axes, norm=None, out=None):
        _numpy_keywords({"out": out})
        return fn(a, s=s, axes=axes, norm=norm)
    return call


_FFT = {
    **{f"fft.{fn.__name__}": _fft_1d(fn) for fn in (fft.fft, fft.ifft, fft.rfft, fft.irfft, fft.hfft, fft.ihfft)},
    **{f"fft.{fn.__name__}": _fft_nd(fn) for fn in (fft.fftn, fft.ifftn, fft.rfftn, fft.irfftn)},
    **{f"fft.{fn.__name__[:-1]}2": _fft_nd(fn, (-2, -1)) for fn in (fft.fftn, fft.ifftn, fft.rfftn, fft.irfftn)},
    "fft.fftshift": lambda x, axes=None: fft.fftshift(x, axes=axes),
    "fft.ifftshift": lambda x, axes=None: fft.ifftshift(x, axes=axes),
}

_FUNCTIONS = {
    "sum": _reduction(statistical.sum), "prod": _reduction(statistical.prod),
    "mean": _reduction(statistical.mean), "var": _reduction(statistical.var, True),
    "std": _reduction(statistical.std, True), "max": _reduction(statistical.max),
    "min": _reduction(statistical.min), "amax": _reduction(statistical.max),
    "amin": _reduction(statistical.min), "all": _reduction(utility.all), "any": _reduction(utility.any),
    "argmax": lambda a, axis=None, **kw: searching.argmax(a, axis=axis, **_numpy_keywords(kw)),
    "argmin": lambda a, axis=None, **kw: searching.argmin(a, axis=axis, **_numpy_keywords(kw)),
    "concatenate": _same(manipulation.concatenate),
    **{fn.__name__: _same(fn) for fn in (
        manipulation.array_split, manipulation.atleast_1d, manipulation.atleast_2d,
        manipulation.atleast_3d, manipulation.column_stack, manipulation.dstack, manipulation.hstack,
        manipulation.pad, manipulation.ravel, manipulation.split, manipulation.swapaxes,
        manipulation.vstack, linear_algebra.einsum, linear_algebra.inner, linear_algebra.vdot,
        creation.copy)},
    **{fn.__name__: _same(fn) for fn in (
        cumulative.cumsum, cumulative.cumprod, cumulative.nancumsum, cumulative.diff,
        statistical.nansum, statistical.nanmean, statistical.nanmax, statistical.nanmin,
        statistical.average, order_statistics.median, order_statistics.percentile,
        order_statistics.quantile, correlating.cov, correlating.corrcoef, histograms.bincount,
        histograms.histogram, histograms.digitize, sets.unique, sets.isin, elementwise.isclose,
        utility.allclose, utility.array_equal)},
    "stack": lambda arrays, axis=0: manipulation.stack(arrays, axis=axis),
    "transpose": lambda a, axes=None: manipulation.transpose(a, axes),
    "reshape": lambda a, shape=None, **kw: manipulation.reshape(a, shape if shape is not None else kw.pop("newshape")),
    "where": lambda c, x=None, y=None: searching.where(c, x, y),
    "clip": lambda a, a_min=None, a_max=None, **kw: elementwise.clip(a, kw.get("min", a_min), kw.get("max", a_max)),
    "dot": _same(linear_algebra.dot), "matmul": _same(linear_algebra.matmul),
    "outer": _same(linear_algebra.outer),
    "tensordot": lambda a, b, axes=2: linear_algebra.tensordot(a, b, axes=axes),
    "vecdot": _same(linear_algebra.vecdot),
    "flip": lambda m, axis=None: manipulation.flip(m, axis=axis),
    "roll": lambda a, shift, axis=None: manipulation.roll(a, shift, axis=axis),
    "repeat": lambda a, repeats, axis=None: manipulation.repeat(a, repeats, axis=axis),
    "tile": _same(manipulation.tile), "moveaxis": _same(manipulation.moveaxis),
    "squeeze": _same(manipulation.squeeze),
    "expand_dims": lambda a, axis: manipulation.expand_dims(a, axis=axis),
    "broadcast_to": _same(manipulation.broadcast_to), "broadcast_arrays": _same(manipulation.broadcast_arrays),
    "take": lambda a, indices, axis=None: indexing.take(a, indices, axis=axis),
    "sort": _same(sorting.sort), "argsort": _same(sorting.argsort),
    "searchsorted": lambda a, v, side="left", sorter=None: searching.searchsorted(a, v, side=side, sorter=sorter),
    "nonzero": _same(searching.nonzero), "count_nonzero": _same(searching.count_nonzero),
    "tril": lambda m, k=0: creation.tril(m, k=k), "triu": lambda m, k=0: creation.triu(m, k=k),
    "zeros_like": lambda a, dtype=None, **kw: creation.zeros_like(a, dtype=dtype),
    "ones_like": lambda a, dtype=None, **kw: creation.ones_like(a, dtype=dtype),
    "empty_like": lambda a, dtype=None, **kw: creation.empty_like(a, dtype=dtype),
    "full_like": lambda a, fill_value, dtype=None, **kw: creation.full_like(a, fill_value, dtype=dtype),
    "round": lambda a, decimals=0: _round(a, decimals, "round"),
    "around": lambda a, decimals=0: _round(a, decimals, "around"),
    "linalg.norm": lambda x, ord=None, axis=None, keepdims=False: linalg.norm(x, ord, axis, keepdims),
    **{f"linalg.{fn.__name__}": _same(fn) for fn in (
        linalg.cholesky, linalg.cross, linalg.det, linalg.diagonal, linalg.inv, linalg.matrix_norm,
        linalg.matrix_power, linalg.matrix_transpose, linalg.outer, linalg.qr, linalg.slogdet,
        linalg.solve, linalg.svdvals, linalg.tensordot, linalg.trace, linalg.vecdot, linalg.vector_norm)},
    "linalg.matmul": _same(linalg.matmul),
    "linalg.eigh": lambda a, UPLO="L": _lower(linalg.eigh, a, UPLO),
    "linalg.eigvalsh": lambda a, UPLO="L": _lower(linalg.eigvalsh, a, UPLO),
    "linalg.svd": _svd,
    "linalg.pinv": _pinv,
    "linalg.matrix_rank": _matrix_rank,
    "diag": _same(linear_algebra.diag), "diagonal": _same(linear_algebra.diagonal),
    "trace": _same(linear_algebra.trace),
    "shape": lambda a: a.shape, "ndim": lambda a: a.ndim, "size": lambda a: a.size,
    "result_type": lambda *a: data_types.result_type(*a),
    **_FFT,
}


def array_function(func, types, args, kwargs):
    name = func.__name__
    module = getattr(func, "__module__", "") or ""
    if module.endswith(("linalg", "fft")):
        name = f"{module.rsplit('.', 1)[-1]}.{name}"
    impl = _FUNCTIONS.get(name)
    if impl is None:
        raise TypeError(
            f"numpy.{name} is not distributed by dgvm.array: use a dgvm.array function, or "
            "gather on purpose with dgvm.array.asnumpy(x)"
        )
    if not all(issubclass(t, (DArray, np.ndarray)) for t in types):
        return NotImplemented
    return impl(*args, **kwargs)
