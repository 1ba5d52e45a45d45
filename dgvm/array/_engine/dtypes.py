"""The data types ``dgvm.array`` supports, and the standard's rules over them.

They are NumPy's dtypes (the public names are ``dgvm.array.float32``, ...); promotion
follows the standard's table, which NumPy 2 implements, with Python scalars weak (they
take the array's dtype when their kind allows, NEP 50).
"""

from __future__ import annotations

import numpy as np

SUPPORTED = tuple(np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128",
))
_SIGNED, _UNSIGNED = SUPPORTED[1:5], SUPPORTED[5:9]
KINDS = {
    "bool": SUPPORTED[:1],
    "signed integer": _SIGNED,
    "unsigned integer": _UNSIGNED,
    "integral": _SIGNED + _UNSIGNED,
    "real floating": SUPPORTED[9:11],
    "complex floating": SUPPORTED[11:],
    "numeric": SUPPORTED[1:],
}


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
    if d == np.float16:
        raise TypeError("float16 arrays are not supported by dgvm.array (the array API has no "
                        "float16; results NumPy gives as float16 are float32 here): use float32")
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


def isdtype(dtype, kind) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name, or a tuple of them."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; known: {sorted(KINDS)}")
        return np.dtype(dtype) in KINDS[kind]
    return np.dtype(dtype) == np.dtype(kind)
