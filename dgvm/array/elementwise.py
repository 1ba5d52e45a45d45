"""Elementwise functions of the array API over DArrays, with broadcasting.

Each call makes one new *deferred* DArray: an expression tree over the arrays it reads,
into which later elementwise calls inline, computed as one fused pass when its values
are needed (``_engine.apply``, ``_engine.deferred``, ``_engine.fused``). Arguments are
DArrays or Python scalars; result dtypes follow NumPy's rules, which are the standard's.
An array with no elements gives one (held on the caller) without a NumPy call. Given
only scalars (Python's or NumPy's) a function answers as NumPy's does, with a NumPy
scalar computed here: ``sqrt(2.0)`` is ``numpy.sqrt(2.0)``.

NumPy's names: ``absolute`` and ``power`` (the standard's ``abs`` and ``pow``), and
``isclose``, composed of the standard's functions into one deferred tree.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.trees import call
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.data_types import astype

__all__ = [
    "abs", "absolute", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_invert", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift", "bitwise_xor",
    "ceil", "clip", "conj", "copysign", "cos", "cosh", "divide", "equal", "exp", "expm1",
    "floor", "floor_divide", "greater", "greater_equal", "hypot", "imag", "isclose", "isfinite", "isinf",
    "isnan", "less", "less_equal", "log", "log10", "log1p", "log2", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative",
    "nextafter", "not_equal", "positive", "pow", "power", "real", "remainder", "round", "sign",
    "signbit", "sin", "sinh", "sqrt", "square", "subtract", "tan", "tanh", "trunc",
]


_SCALARS = (bool, int, float, complex, np.generic)


def _scalars_only(name, args) -> bool:
    """Whether NumPy answers this call here: no DArray among ``args``, all of them
    scalars. An array that is not a DArray (a list, a NumPy array) is refused: its values
    would be computed on the caller."""
    if any(isinstance(a, ArrayCore) for a in args):
        return False
    for a in args:
        if a is not None and not isinstance(a, _SCALARS):
            raise TypeError(f"dgvm.array.{name} takes DArrays and scalars, not {type(a).__name__}: "
                            "make it a DArray with dgvm.array.asarray")
    return True


def _numpy_scalar(name, args):
    """NumPy's answer to ``name`` of scalars (a NumPy scalar, NumPy's dtype and warnings)."""
    return call(np, name, list(args))


def _unary(name):
    def f(x, /):
        if _scalars_only(name, (x,)):
            return _numpy_scalar(name, (x,))
        return apply(name, x)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise ``{name}`` of a DArray (array API)."
    return f


def _binary(name):
    def f(x1, x2, /):
        if _scalars_only(name, (x1, x2)):
            return _numpy_scalar(name, (x1, x2))
        return apply(name, x1, x2)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise ``{name}`` of two DArrays or a DArray and a scalar (array API)."
    return f


# One argument.
abs = _unary("abs")
acos = _unary("acos")
acosh = _unary("acosh")
asin = _unary("asin")
asinh = _unary("asinh")
atan = _unary("atan")
atanh = _unary("atanh")
bitwise_invert = _unary("bitwise_invert")
ceil = _unary("ceil")
conj = _unary("conj")
cos = _unary("cos")
cosh = _unary("cosh")
exp = _unary("exp")
expm1 = _unary("expm1")
floor = _unary("floor")
imag = _unary("imag")
isfinite = _unary("isfinite")
isinf = _unary("isinf")
isnan = _unary("isnan")
log = _unary("log")
log1p = _unary("log1p")
log2 = _unary("log2")
log10 = _unary("log10")
logical_not = _unary("logical_not")
negative = _unary("negative")
positive = _unary("positive")
real = _unary("real")
round = _unary("round")
sign = _unary("sign")
signbit = _unary("signbit")
sin = _unary("sin")
sinh = _unary("sinh")
sqrt = _unary("sqrt")
square = _unary("square")
tan = _unary("tan")
tanh = _unary("tanh")
trunc = _unary("trunc")

# Two arguments.
add = _binary("add")
atan2 = _binary("atan2")
bitwise_and = _binary("bitwise_and")
bitwise_left_shift = _binary("bitwise_left_shift")
bitwise_or = _binary("bitwise_or")
bitwise_right_shift = _binary("bitwise_right_shift")
bitwise_xor = _binary("bitwise_xor")
copysign = _binary("copysign")
divide = _binary("divide")
equal = _binary("equal")
floor_divide = _binary("floor_divide")
greater = _binary("greater")
greater_equal = _binary("greater_equal")
hypot = _binary("hypot")
less = _binary("less")
less_equal = _binary("less_equal")
logaddexp = _binary("logaddexp")
logical_and = _binary("logical_and")
logical_or = _binary("logical_or")
logical_xor = _binary("logical_xor")
maximum = _binary("maximum")
minimum = _binary("minimum")
multiply = _binary("multiply")
nextafter = _binary("nextafter")
not_equal = _binary("not_equal")
pow = _binary("pow")
remainder = _binary("remainder")
subtract = _binary("subtract")


@empty_aware
def clip(x, /, min=None, max=None):  # noqa: A002  (the standard's names)
    """Clamp every element to ``[min, max]`` (either may be None, a scalar or a DArray)."""
    if _scalars_only("clip", (x, min, max)):
        return np.clip(x, min, max)
    if min is None and max is None:
        return astype(x, x.dtype, copy=True)
    return apply("clip", x, min, max, dtype=x.dtype)


def absolute(x, /):
    """NumPy's name of ``abs``."""
    return abs(x)


def power(x1, x2, /):
    """NumPy's name of ``pow``: ``x1`` to the power ``x2`` (DArrays or scalars)."""
    return pow(x1, x2)


def _op(name, *args):
    """``name`` elementwise: a deferred DArray if an argument is one, else NumPy's scalar."""
    if any(isinstance(a, ArrayCore) for a in args):
        return apply(name, *args)
    return _numpy_scalar(name, args)


@empty_aware
def isclose(a, b, /, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Where ``|a - b| <= atol + rtol * |b|`` (and ``b`` is finite), or ``a == b``; NaNs
    are equal to each other with ``equal_nan``. NumPy's test, asymmetric in ``a`` and
    ``b``; either may be a Python scalar."""
    for name, v in (("a", a), ("b", b)):
        if not isinstance(v, (ArrayCore, *_SCALARS)):
            raise TypeError(f"dgvm.array.isclose: {name} must be a DArray or a scalar, "
                            f"got {type(v).__name__}")
    if not isinstance(a, ArrayCore) and not isinstance(b, ArrayCore):
        raise TypeError("dgvm.array.isclose needs at least one DArray argument")
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"dgvm.array.isclose: {name} must be a real scalar, got {type(v).__name__}")
    # NumPy compares in floating point: b is taken as (at least) float.
    if isinstance(b, ArrayCore):
        b = astype(b, np.result_type(b.dtype, 1.0), copy=False)
    elif isinstance(b, int):
        b = float(b)
    tolerance = _op("add", atol, _op("multiply", rtol, _op("abs", b)))
    near = _op("less_equal", _op("abs", _op("subtract", a, b)), tolerance)
    result = _op("logical_or", _op("logical_and", near, _op("isfinite", b)), _op("equal", a, b))
    if equal_nan:
        result = _op("logical_or", result, _op("logical_and", _op("isnan", a), _op("isnan", b)))
    return result
