"""NumPy interoperability: NumPy functions and ufuncs given a DArray run distributed.

``np.sum(x)``, ``np.exp(x)``, ``np.concatenate([x, y])`` ... dispatch to ``dgvm.array``
through ``__array_function__`` / ``__array_ufunc__``. A NumPy function dgvm does not
distribute raises a ``TypeError`` naming it: never a silent gather to one place
(``dgvm.array.asnumpy(x)`` gathers on purpose).
"""

from __future__ import annotations

import math

import numpy as np

# NumPy ufunc names that differ from the array API's.
_UFUNC_NAMES = {
    "arccos": "acos", "arccosh": "acosh", "arcsin": "asin", "arcsinh": "asinh",
    "arctan": "atan", "arctanh": "atanh", "arctan2": "atan2", "invert": "bitwise_invert",
    "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift", "power": "pow",
    "true_divide": "divide", "absolute": "abs", "conjugate": "conj", "mod": "remainder",
    "fmod": None,
}
_REDUCE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min",
           "logical_and": "all", "logical_or": "any"}


def _ns():
    import dgvm.array

    return dgvm.array


def array_ufunc(ufunc, method, inputs, kwargs):
    ns = _ns()
    if kwargs.get("out") is not None:
        raise TypeError(f"numpy.{ufunc.__name__}(..., out=) is not supported for DArrays; "
                        "assign the result instead")
    name = _UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__)
    if method == "__call__" and name and hasattr(ns, name) and not kwargs:
        return getattr(ns, name)(*inputs)
    if method == "reduce" and ufunc.__name__ in _REDUCE and len(inputs) == 1:
        kw = {k: v for k, v in kwargs.items() if k in ("axis", "keepdims", "dtype")}
        kw.setdefault("axis", 0)
        if ufunc.__name__ not in ("add", "multiply"):
            kw.pop("dtype", None)
        return getattr(ns, _REDUCE[ufunc.__name__])(inputs[0], **kw)
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


def _reduction(name, ddof=False):
    def f(a, axis=None, *args, **kwargs):
        kw = _numpy_keywords(kwargs, ddof)
        if args:
            raise TypeError(f"numpy.{name} positional arguments after axis are not supported for DArrays")
        return getattr(_ns(), name)(a, axis=axis, **kw)

    return f


def _same(name, module=""):
    """NumPy's ``name`` is dgvm.array's (``module``: of its ``linalg``)."""
    def call(*args, **kwargs):
        ns = getattr(_ns(), module) if module else _ns()
        return getattr(ns, name)(*args, **_numpy_keywords(kwargs))
    return call


def _lower(name, a, uplo):
    # dgvm's eigh reads the lower triangle, as the standard's does.
    return getattr(_ns().linalg, name)(a) if uplo == "L" else _unsupported(f"linalg.{name}", "UPLO='U'")


_FUNCTIONS = {
    "sum": _reduction("sum"), "prod": _reduction("prod"), "mean": _reduction("mean"),
    "var": _reduction("var", True), "std": _reduction("std", True),
    "max": _reduction("max"), "min": _reduction("min"), "amax": _reduction("max"),
    "amin": _reduction("min"), "all": _reduction("all"), "any": _reduction("any"),
    "argmax": lambda a, axis=None, **kw: _ns().argmax(a, axis=axis, **_numpy_keywords(kw)),
    "argmin": lambda a, axis=None, **kw: _ns().argmin(a, axis=axis, **_numpy_keywords(kw)),
    "cumsum": lambda a, axis=None, dtype=None: _ns().cumulative_sum(
        a if axis is not None or a.ndim == 1 else _ns().reshape(a, (-1,)), axis=axis, dtype=dtype),
    "concatenate": lambda arrays, axis=0: _ns().concat(arrays, axis=axis),
    "stack": lambda arrays, axis=0: _ns().stack(arrays, axis=axis),
    "transpose": lambda a, axes=None: _ns().transpose(a, axes),
    "reshape": lambda a, shape=None, **kw: _ns().reshape(a, shape if shape is not None else kw.pop("newshape")),
    "where": lambda c, x=None, y=None: _ns().where(c, x, y),
    "clip": lambda a, a_min=None, a_max=None, **kw: _ns().clip(a, kw.get("min", a_min), kw.get("max", a_max)),
    "dot": _same("dot"), "matmul": _same("matmul"), "outer": _same("outer"),
    "tensordot": lambda a, b, axes=2: _ns().tensordot(a, b, axes=axes),
    "vecdot": _same("vecdot"),
    "flip": lambda m, axis=None: _ns().flip(m, axis=axis),
    "roll": lambda a, shift, axis=None: _ns().roll(a, shift, axis=axis),
    "repeat": lambda a, repeats, axis=None: _ns().repeat(a, repeats, axis=axis),
    "tile": _same("tile"), "moveaxis": _same("moveaxis"), "squeeze": _same("squeeze"),
    "expand_dims": lambda a, axis: _ns().expand_dims(a, axis=axis),
    "broadcast_to": _same("broadcast_to"), "broadcast_arrays": _same("broadcast_arrays"),
    "take": lambda a, indices, axis=None: _ns().take(a, indices, axis=axis),
    "sort": lambda a, axis=-1, **kw: _ns().sort(a, axis=axis),
    "argsort": lambda a, axis=-1, **kw: _ns().argsort(a, axis=axis),
    "searchsorted": lambda a, v, side="left", sorter=None: _ns().searchsorted(a, v, side=side, sorter=sorter),
    "nonzero": _same("nonzero"), "count_nonzero": _same("count_nonzero"),
    "tril": lambda m, k=0: _ns().tril(m, k=k), "triu": lambda m, k=0: _ns().triu(m, k=k),
    "zeros_like": lambda a, dtype=None, **kw: _ns().zeros_like(a, dtype=dtype),
    "ones_like": lambda a, dtype=None, **kw: _ns().ones_like(a, dtype=dtype),
    "empty_like": lambda a, dtype=None, **kw: _ns().empty_like(a, dtype=dtype),
    "full_like": lambda a, fill_value, dtype=None, **kw: _ns().full_like(a, fill_value, dtype=dtype),
    "round": lambda a, decimals=0: _ns().round(a) if decimals == 0 else _unsupported("round", "decimals"),
    "around": lambda a, decimals=0: _ns().round(a) if decimals == 0 else _unsupported("around", "decimals"),
    "linalg.norm": lambda x, ord=None, axis=None, keepdims=False: _ns().linalg.norm(x, ord, axis, keepdims),
    **{f"linalg.{n}": _same(n, "linalg") for n in (
        "cholesky", "cross", "det", "diagonal", "inv", "matrix_norm", "matrix_power", "matrix_transpose",
        "outer", "qr", "slogdet", "solve", "svdvals", "tensordot", "trace", "vecdot", "vector_norm")},
    "linalg.matmul": _same("matmul"),
    "linalg.eigh": lambda a, UPLO="L": _lower("eigh", a, UPLO),
    "linalg.eigvalsh": lambda a, UPLO="L": _lower("eigvalsh", a, UPLO),
    "linalg.svd": lambda a, full_matrices=True, compute_uv=True, hermitian=False: (
        _unsupported("linalg.svd", "hermitian") if hermitian else
        _ns().linalg.svd(a, full_matrices=full_matrices) if compute_uv else _ns().linalg.svdvals(a)),
    "linalg.pinv": lambda a, rcond=None, hermitian=False, *, rtol=None: (
        _unsupported("linalg.pinv", "hermitian") if hermitian else
        _ns().linalg.pinv(a, rtol=rtol if rcond is None else rcond)),
    "linalg.matrix_rank": lambda A, tol=None, hermitian=False, *, rtol=None: (
        _unsupported("linalg.matrix_rank", "tol") if tol is not None else
        _unsupported("linalg.matrix_rank", "hermitian") if hermitian else
        _ns().linalg.matrix_rank(A, rtol=rtol)),
    "diag": _same("diag"), "diagonal": _same("diagonal"), "trace": _same("trace"),
    "shape": lambda a: a.shape, "ndim": lambda a: a.ndim, "size": lambda a: a.size,
    "result_type": lambda *a: _ns().result_type(*a),
}


def _unsupported(name, what):
    raise TypeError(f"numpy.{name} with {what}= is not distributed by dgvm.array")


def array_function(func, types, args, kwargs):
    from dgvm.array.darray import DArray

    name = func.__name__
    module = getattr(func, "__module__", "") or ""
    if module.endswith("linalg"):
        name = f"linalg.{name}"
    impl = _FUNCTIONS.get(name)
    if impl is None:
        raise TypeError(
            f"numpy.{name} is not distributed by dgvm.array: use a dgvm.array function, or "
            "gather on purpose with dgvm.array.asnumpy(x)"
        )
    if not all(issubclass(t, (DArray, np.ndarray)) for t in types):
        return NotImplemented
    return impl(*args, **kwargs)


def dlpack(x, *, stream=None, max_version=None, dl_device=None, copy=None):
    """DLPack export of a single-chunk array (its one chunk, gathered to the caller as a
    NumPy array when ``copy`` allows): a DArray of several chunks is not one buffer."""
    nchunks = math.prod(x.numblocks)  # known without storing a deferred x
    if nchunks != 1:
        raise BufferError(f"__dlpack__ needs a single-chunk DArray; this one has {nchunks} chunks")
    if copy is False:
        raise BufferError("__dlpack__(copy=False): the chunk lives on a worker, not in this process")
    return x.to_numpy().__dlpack__()


def dlpack_device(x):
    return (1, 0)  # kDLCPU: what __dlpack__ gives the caller is host memory
