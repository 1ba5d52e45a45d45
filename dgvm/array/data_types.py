"""Data types, and the standard's data type functions.

The names are NumPy's scalar types (``dgvm.array.float32`` is ``numpy.float32``:
``float32(5)`` is NumPy's scalar, and a DArray's ``dtype`` compares equal to it, as a
NumPy array's does), and ``dgvm.array.dtype`` is ``numpy.dtype``. Promotion between
arrays follows the standard's table, which NumPy 2 implements; Python scalars are weak
(they take the array's dtype when their kind allows, NEP 50), as in NumPy.

``float16`` names NumPy's type, for programs that spell it; an array of it is refused
(``TypeError``): dgvm.array, like the standard, has no float16 arrays.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.dtypes import check, dtype_of, isdtype, result_type
from dgvm.array._engine.zero_size import empty_aware

__all__ = [
    "astype", "bool", "bool_", "can_cast", "complex128", "complex64", "dtype", "finfo",
    "float16", "float32", "float64", "iinfo", "int16", "int32", "int64", "int8", "int_",
    "intp", "isdtype", "result_type", "uint16", "uint32", "uint64", "uint8",
]

# NumPy's scalar types under the standard's names (and NumPy's few aliases programs use).
bool = bool_ = np.bool_  # noqa: A001  (the standard's name)
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float16, float32, float64 = np.float16, np.float32, np.float64
complex64, complex128 = np.complex64, np.complex128
int_, intp = np.int_, np.intp
dtype = np.dtype


@empty_aware
def astype(x, dtype, /, *, copy: builtins.bool = True, device=None):
    """``x`` cast to ``dtype`` (a new array unless ``copy=False`` and nothing changes)."""
    dtype = check(dtype)
    if not copy and dtype == x.dtype:
        return x
    return apply("astype", x, dtype=dtype)


_ORDERS = ("K", "A", "C", "F")
_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def array_astype(x, dtype, order="K", casting="unsafe", subok=True, copy=True, *, device=None):
    """NumPy's ``ndarray.astype(dtype, order, casting, subok, copy)`` of a DArray: the
    standard's ``astype`` with NumPy's arguments (``dtype`` by keyword too, ``casting``
    checked as NumPy checks it). A DArray is C-ordered: ``order`` is only validated."""
    if order not in _ORDERS:
        raise ValueError(f"astype: order must be one of {_ORDERS}, not {order!r}")
    if casting not in _CASTINGS:
        raise ValueError(f"astype: casting must be one of {_CASTINGS}, not {casting!r}")
    target = check(dtype)
    if not np.can_cast(x.dtype, target, casting=casting):
        raise TypeError(f"astype: cannot cast array data from {x.dtype} to {target} "
                        f"according to the rule {casting!r}")
    return astype(x, target, copy=builtins.bool(copy), device=device)


def can_cast(from_, to) -> builtins.bool:
    return np.can_cast(dtype_of(from_), dtype_of(to))


@dataclass(frozen=True)
class FloatInfo:
    """The standard's ``finfo``: Python numbers, not NumPy scalars; NumPy's other
    attributes (``tiny``, ``resolution``, ``precision``, ...) as NumPy gives them."""

    bits: builtins.int
    eps: builtins.float
    max: builtins.float
    min: builtins.float
    smallest_normal: builtins.float
    dtype: np.dtype

    def __getattr__(self, name):
        return getattr(np.finfo(self.dtype), name)


def finfo(type_) -> FloatInfo:
    f = np.finfo(dtype_of(type_))
    return FloatInfo(builtins.int(f.bits), builtins.float(f.eps), builtins.float(f.max),
                     builtins.float(f.min), builtins.float(f.smallest_normal), f.dtype)


def iinfo(type_):
    return np.iinfo(dtype_of(type_))
