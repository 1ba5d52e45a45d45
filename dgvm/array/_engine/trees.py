"""Elementwise expression trees: their form, and their value over chunks.

A tree is ``("in", i)`` (leaf i: an input array, or its chunk), ``("const", v)`` (a
Python scalar, or None) or ``("call", name, args, dtype)``: the array API function
``name`` of the trees ``args``, cast to ``dtype``. Every node casts to its own dtype, so
a tree gives the same values whether it runs whole, fused into one kernel (``fused``) or
node by node. ``deferred`` builds trees; ``tree_op`` runs them per chunk.
"""

from __future__ import annotations

from dgvm.array._engine import special_values

UNARY = (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_invert", "ceil",
    "conj", "cos", "cosh", "exp", "expm1", "floor", "imag", "isfinite", "isinf", "isnan",
    "log", "log1p", "log2", "log10", "logical_not", "negative", "positive", "real", "round",
    "sign", "signbit", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc",
)
BINARY = (
    "add", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift",
    "bitwise_xor", "copysign", "divide", "equal", "floor_divide", "greater", "greater_equal",
    "hypot", "less", "less_equal", "logaddexp", "logical_and", "logical_or", "logical_xor",
    "maximum", "minimum", "multiply", "nextafter", "not_equal", "pow", "remainder", "subtract",
)
# The standard's names that NumPy and CuPy spell the classic way.
CLASSIC = {
    "acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh",
    "atan": "arctan", "atanh": "arctanh", "atan2": "arctan2", "bitwise_invert": "invert",
    "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
    "pow": "power", "divide": "true_divide",
}
# Nodes that are not one ufunc of their name (``tree_op`` runs them without ``out=``).
NOT_UFUNCS = ("where", "clip", "astype")


def call(xp, name: str, args):
    """The function ``name`` of ``args`` on the array module ``xp`` (no cast)."""
    if name == "where":
        return xp.where(*args)
    if name == "clip":
        x, lo, hi = args
        if lo is not None:
            x = xp.maximum(x, lo)
        if hi is not None:
            x = xp.minimum(x, hi)
        return x
    if name == "astype":
        return args[0]  # the cast happens in evaluate
    if special_values.applies(name, getattr(args[0], "dtype", None)):
        return special_values.call(xp, name, args)
    if name.startswith("logical_"):
        # NumPy takes complex numbers here (true when non-zero); CuPy does not.
        args = [a != 0 if getattr(a, "dtype", None) is not None and a.dtype.kind == "c" else a
                for a in args]
    return getattr(xp, CLASSIC.get(name, name))(*args)


def evaluate(expr, leaves, xp):
    """Value of a tree over ``leaves``; every call's result has exactly its dtype."""
    kind = expr[0]
    if kind == "in":
        return leaves[expr[1]]
    if kind == "const":
        return expr[1]
    _, name, args, dtype = expr
    value = call(xp, name, [evaluate(a, leaves, xp) for a in args])
    value = xp.asarray(value)
    return value if value.dtype == dtype else value.astype(dtype)


def nodes(expr) -> int:
    """How many nodes the tree has."""
    if expr[0] != "call":
        return 1
    return 1 + sum(nodes(a) for a in expr[2])
