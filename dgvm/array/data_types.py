"""Data types, and the standard's data type functions.

The dtypes are NumPy's (``dgvm.array.float32`` is NumPy's float32 dtype), so a DArray's
``dtype`` compares equal to the NumPy dtype of the same name. Promotion between arrays
follows the standard's table, which NumPy 2 implements; Python scalars are weak (they
take the array's dtype when their kind allows, NEP 50), as in NumPy.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.dtypes import check, dtype_of, isdtype, result_type
from dgvm.array._engine.zero_size import empty_aware

__all__ = [
    "astype", "bool", "can_cast", "complex128", "complex64", "finfo", "float32", "float64",
    "iinfo", "int16", "int32", "int64", "int8", "isdtype", "result_type", "uint16", "uint32",
    "uint64", "uint8",
]

bool = np.dtype("bool")  # noqa: A001  (the standard's name)
int8, int16, int32, int64 = (np.dtype(f"int{n}") for n in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (np.dtype(f"uint{n}") for n in (8, 16, 32, 64))
float32, float64 = np.dtype("float32"), np.dtype("float64")
complex64, complex128 = np.dtype("complex64"), np.dtype("complex128")


@empty_aware
def astype(x, dtype, /, *, copy: builtins.bool = True, device=None):
    """``x`` cast to ``dtype`` (a new array unless ``copy=False`` and nothing changes)."""
    dtype = check(dtype)
    if not copy and dtype == x.dtype:
        return x
    return apply("astype", x, dtype=dtype)


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
