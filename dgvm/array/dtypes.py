"""Data types of ``dgvm.array`` and the array API's type rules.

The dtypes are NumPy's (``dgvm.array.float32 is numpy.float32``'s dtype), so a DArray's
``dtype`` compares equal to the NumPy dtype of the same name. Promotion between arrays
follows the standard's table, which NumPy 2 implements; Python scalars are weak (they
take the array's dtype when their kind allows, NEP 50), as in NumPy.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import numpy as np

bool = np.dtype("bool")  # noqa: A001  (the standard's name)
int8, int16, int32, int64 = (np.dtype(f"int{n}") for n in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (np.dtype(f"uint{n}") for n in (8, 16, 32, 64))
float32, float64 = np.dtype("float32"), np.dtype("float64")
complex64, complex128 = np.dtype("complex64"), np.dtype("complex128")

SUPPORTED = (bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
             float32, float64, complex64, complex128)

_KINDS = {
    "bool": (bool,),
    "signed integer": (int8, int16, int32, int64),
    "unsigned integer": (uint8, uint16, uint32, uint64),
    "integral": (int8, int16, int32, int64, uint8, uint16, uint32, uint64),
    "real floating": (float32, float64),
    "complex floating": (complex64, complex128),
    "numeric": SUPPORTED[1:],
}

default_float = float64
default_int = int64
default_complex = complex128


def dtype_of(x) -> np.dtype:
    """The dtype of an array or scalar, or ``x`` itself as a dtype (a dtype, its name, a
    scalar type such as ``np.float32``, whose ``dtype`` is a class attribute)."""
    if isinstance(x, (type, np.dtype, str)):
        return np.dtype(x)
    d = getattr(x, "dtype", None)
    return np.dtype(d) if d is not None else np.asarray(x).dtype


def check(dtype) -> np.dtype:
    """``dtype`` as a NumPy dtype, if the array API (and so dgvm) supports it."""
    d = np.dtype(dtype)
    if d not in SUPPORTED:
        raise TypeError(
            f"dtype {d} is not supported by dgvm.array; supported: "
            + ", ".join(str(s) for s in SUPPORTED)
        )
    return d


def result_type(*arrays_and_dtypes) -> np.dtype:
    """The dtype the standard's promotion gives (Python scalars are weak)."""
    args = []
    for a in arrays_and_dtypes:
        if isinstance(a, (int, float, complex)) and not isinstance(a, np.generic):
            args.append(a)  # weak, as NumPy 2 treats Python scalars
        else:
            args.append(dtype_of(a))
    return np.result_type(*args)


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


def isdtype(dtype, kind) -> builtins.bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name, or a tuple of them."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; known: {sorted(_KINDS)}")
        return np.dtype(dtype) in _KINDS[kind]
    return np.dtype(dtype) == np.dtype(kind)

