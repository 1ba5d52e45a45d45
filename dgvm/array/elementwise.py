"""Elementwise functions of the array API over DArrays, with broadcasting.

Each call makes one new *deferred* DArray: an expression tree over the arrays it reads,
into which later elementwise calls inline (``dgvm.array._engine.deferred``). When the values are
needed the tree runs as one operation: one allocation (colocated with a leaf of the
result's shape and chunks), one task per worker, one pass per chunk
(``dgvm.array._engine.fused``: a ``cupy.fuse`` kernel on ``cuda``, cache-sized NumPy tiles on
``cpu``). Result dtypes are decided on the caller with NumPy's rules, which are the
standard's; every node of the tree casts to its own dtype, so fused and unfused agree.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise, deferred, fused, special_values
from dgvm.array.darray import DArray

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


def _call(xp, name: str, args):
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
    """Value of an expression tree: ``("in", i)``, ``("const", v)`` or
    ``("call", name, args, dtype)``; every call's result has exactly its dtype."""
    kind = expr[0]
    if kind == "in":
        return leaves[expr[1]]
    if kind == "const":
        return expr[1]
    _, name, args, dtype = expr
    value = _call(xp, name, [evaluate(a, leaves, xp) for a in args])
    value = xp.asarray(value)
    return value if value.dtype == dtype else value.astype(dtype)


def broadcast_region(shape, lo, hi) -> tuple[list, list]:
    """The region of an input of ``shape`` that broadcasts onto the elements ``[lo, hi)``
    of a result: aligned on the right, its length-1 axes read at 0."""
    d = len(lo) - len(shape)
    return ([0 if shape[j] == 1 else lo[j + d] for j in range(len(shape))],
            [1 if shape[j] == 1 else hi[j + d] for j in range(len(shape))])


@dataclass
class Elementwise:
    """Blockwise op: an expression over broadcast inputs; leaf i has shape ``shapes[i]``
    and reads its input through the View ``views[i]`` (None: as it is)."""

    expr: tuple
    shapes: list
    shape: tuple
    views: list = None

    @classmethod
    def of(cls, expr, inputs, views, shape):
        return cls(expr, [deferred.view_shape(a, v) for a, v in zip(inputs, views)], shape, list(views))

    @property
    def aligned(self) -> bool:
        """Every input is read as it is, without broadcasting: output elements
        ``[lo, hi)`` read the same elements of each input."""
        return all(v is None for v in (self.views or [])) and all(tuple(s) == tuple(self.shape) for s in self.shapes)

    def region(self, i: int, lo, hi):
        """The region of input ``i`` that broadcasts onto output elements ``[lo, hi)``,
        in the input's own axis order."""
        rlo, rhi = broadcast_region(self.shapes[i], lo, hi)
        view = self.views[i] if self.views else None
        return (rlo, rhi) if view is None else view.region(rlo, rhi)

    def __getstate__(self):  # the stripped tree is made where it is used
        return {k: v for k, v in self.__dict__.items() if k != "stripped"}

    @functools.cached_property
    def stripped(self) -> tuple:
        """``fused.strip(self.expr)``, made once per op: a task runs it over each of its chunks."""
        return fused.strip(self.expr)

    def leaves(self, read, lo, hi, xp) -> list:
        out = []
        for i in range(len(self.shapes)):
            value = read(i, *self.region(i, lo, hi))
            view = self.views[i] if self.views else None
            out.append(value if view is None else view.apply(value))
        return out

    def block(self, read, lo, hi, xp):
        return self.value(self.leaves(read, lo, hi, xp), xp)

    def block_into(self, read, lo, hi, xp, target) -> bool:
        """Write the chunk straight into ``target`` (no temporary); False when the tree
        cannot (the caller then copies ``block``'s value in)."""
        if not self.writes_into(target):
            return False
        self.leaves_into(self.leaves(read, lo, hi, xp), xp, target)
        return True

    def writes_into(self, target) -> bool:
        """Whether ``leaves_into`` can write this tree into ``target``."""
        kind, *rest = self.expr
        return kind == "in" or (kind == "call" and np.dtype(rest[2]) == target.dtype)

    def leaves_into(self, leaves, xp, target) -> None:
        """The tree's value over ``leaves`` written into ``target``: the whole tree in one
        pass (``dgvm.array._engine.fused``), else its last operation as a ufunc with ``out=``."""
        kind, *rest = self.expr
        if kind == "in":  # a leaf alone (``x.T`` computed): one copy into the chunk
            target[...] = leaves[rest[0]]
            return
        if fused.run_into(self.expr, leaves, xp, target, self.stripped):
            return
        ufunc = getattr(xp, CLASSIC.get(rest[0], rest[0]), None)
        special = (rest[0] in ("where", "clip", "astype") or rest[0].startswith("logical_")
                   or special_values.applies(rest[0], rest[2]))
        if special or ufunc is None or not hasattr(ufunc, "nin"):
            target[...] = self.value(leaves, xp)
            return
        with np.errstate(all="ignore"):
            args = [evaluate(a, leaves, xp) for a in rest[1]]
            ufunc(*args, out=target)

    def value(self, leaves, xp):
        """The tree's value over ``leaves`` (a new array, or a leaf itself)."""
        with np.errstate(all="ignore"):
            return evaluate(self.expr, leaves, xp)


def _probe(x):
    """A one-element NumPy stand-in for an argument, for dtype rules."""
    if isinstance(x, DArray):
        return np.ones(1, dtype=x.dtype)
    return x


def result_dtype(name: str, args) -> np.dtype:
    """The dtype NumPy gives ``name`` on these arguments; NumPy's TypeError if it refuses."""
    key = [name]
    for a in args:
        if isinstance(a, DArray):
            key.append(a.dtype)
        elif type(a) in (bool, float, complex):
            key.append(type(a))  # weak: its value never changes the answer
        elif type(a) is int:
            # NumPy refuses an int out of an integer dtype's range: values of one sign
            # and bit length fit the same dtypes.
            key.append((int, a < 0, (-a - 1 if a < 0 else a).bit_length()))
        elif isinstance(a, np.generic):
            key.append((np.generic, a.dtype))
        else:
            return _numpy_result_dtype(name, args)
    # Asked for every operation of every loop: NumPy's answer, once per kind of call.
    key = tuple(key)
    dtype = _DTYPES.get(key)
    if dtype is None:
        dtype = _DTYPES[key] = _numpy_result_dtype(name, args)  # a refusal raises, uncached
    return dtype


_DTYPES: dict = {}  # result_dtype's answers; a few hundred kinds of call at most


def _numpy_result_dtype(name: str, args) -> np.dtype:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        dtype = np.asarray(_call(np, name, [_probe(a) for a in args])).dtype
    # NumPy answers float16 for some functions of small integers and bools; dgvm.array
    # has no float16 (the standard does not either), so those results are float32.
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _leaf(a, inputs: list, views: list):
    if isinstance(a, DArray):
        return deferred.leaf(a, inputs, views)
    if a is None or isinstance(a, (bool, int, float, complex, np.generic)):
        return ("const", a)
    raise TypeError(f"dgvm.array: expected a DArray or a Python scalar, got {type(a).__name__}")


def out_chunks(arrays, shape, dtype):
    """Chunks of a broadcast result: per axis, those of an input that spans that axis."""
    chunks = []
    for ax, n in enumerate(shape):
        for a in arrays:
            d = len(shape) - a.ndim
            if ax >= d and a.shape[ax - d] == n:
                chunks.append(a.chunks[ax - d])
                break
        else:
            chunks.append((n,))
    return tuple(chunks)


def apply(name: str, *args, dtype=None, out: DArray | None = None) -> DArray:
    """``name`` elementwise over ``args`` (DArrays and scalars): a new deferred DArray
    (computed, fused with the elementwise operations that follow, when first needed), or
    into ``out`` in place."""
    arrays = [a for a in args if isinstance(a, DArray)]
    if not arrays:
        raise TypeError(f"dgvm.array.{name} needs at least one DArray argument")
    try:
        shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        raise ValueError(f"dgvm.array.{name}: shapes {[a.shape for a in arrays]} do not broadcast together") from None
    dtype = np.dtype(dtype) if dtype is not None else result_dtype(name, args)
    if out is not None and out.shape != shape:
        raise ValueError(f"in-place {name}: the result's shape {shape} is not the array's {out.shape}")
    if math.prod(shape) == 0:  # no element to compute (dgvm.array._engine.zero_size)
        from dgvm.array._engine import zero_size

        return out if out is not None else zero_size.array(shape, dtype, arrays[0].client)
    if all(deferred.host_value(a) is not None for a in arrays) and (out is None or deferred.host_value(out) is not None):
        return _on_caller(name, args, dtype, out, arrays[0].client)
    if out is not None and out._deferred is None:
        # Deferred results that read out's present values (x * 2 in x += x * 2, x.T in
        # x += x.T) are computed before out is written: once, and the tree reads them.
        out.before_write()
    inputs: list = []
    views: list = []
    expr = ("call", name, [_leaf(a, inputs, views) for a in args], dtype)
    if out is None:
        result = DArray(None, shape, dtype, out_chunks(arrays, shape, dtype))
        deferred.defer(result, deferred.Deferred(expr, inputs, name, views))
        return result
    # In place keeps the array's dtype: the standard's rule for ``x += y``.
    expr = ("call", "astype", [expr], out.dtype)
    if out._deferred is not None:  # nothing computed yet: the tree grows instead
        deferred.undefer(out)
        deferred.defer(out, deferred.Deferred(expr, inputs, name, views))
        return out
    blockwise.run(Elementwise.of(expr, inputs, views, shape), out, inputs, name)
    return out


def _on_caller(name, args, dtype, out, client) -> DArray:
    """``name`` over host values (and scalars), computed here with NumPy."""
    values = [deferred.host_value(a) if isinstance(a, DArray) else a for a in args]
    with np.errstate(all="ignore"):
        value = np.asarray(_call(np, name, values)).astype(dtype if out is None else out.dtype)
    if out is None:
        return deferred.on_caller(value, client, name)
    deferred.hold(out, value, client, name)
    return out


def materialize(x: DArray) -> None:
    """Compute a deferred DArray: allocate it (colocated with a leaf of its shape and
    chunks) and run its whole tree in one pass, one task per worker; a host value is
    written from the caller. Not zero-filled: every element is written next."""
    from dgvm.array.creation import allocate

    d = x._deferred
    if d.host is not None:
        alloc = allocate(x.shape, x.dtype, x.chunks, client=d.client, zero=False)
        _fill(x, d, alloc, lambda: x.write_blocks(d.host))
        return
    op = Elementwise.of(d.expr, d.inputs, d.views, x.shape)
    for a in d.inputs:
        deferred.check_usable(a)  # freed meanwhile: raises before anything is allocated
    alloc = allocate(x.shape, x.dtype, x.chunks, colocate=result_placement(x, d), client=x.client, zero=False)
    name = d.name if d.nodes == 1 else f"fused{d.nodes}-{d.name}"
    _fill(x, d, alloc, lambda: blockwise.run(op, x, d.inputs, name))


def _fill(x: DArray, d, alloc, write) -> None:
    """``x`` takes ``alloc`` and ``write()`` fills it. Nothing half-made: on failure the
    memory goes back and ``x`` is deferred again."""
    from dgvm.array._engine.lifecycle import free_later

    deferred.undefer(x)
    x._adopt(alloc)
    try:
        write()
    except BaseException:
        x._alloc = None
        after = alloc.pending.writes  # a reused allocation: tasks may still run on it
        if after:
            free_later(alloc, after)
        else:
            alloc.free()
        deferred.defer(x, d)
        raise


def lead_input(x: DArray, d) -> DArray | None:
    """An input read as it is (no axis order) with ``x``'s shape and chunks: chunk k of
    ``x`` then reads chunk k of it."""
    return next((a for a, v in zip(d.inputs, d.views)
                 if v is None and a.shape == x.shape and a.chunks == x.chunks), None)


def result_placement(x: DArray, d):
    """Where a deferred result goes: with its lead input's chunks; else, for an input read
    through a view of its grid (``x.T``, ``x[::2]``), chunk k goes where the input chunk
    holding its first element lives."""
    from dgvm.array.manipulation import picks_near

    lead = lead_input(x, d)
    if lead is not None:
        return lead
    for a, v in zip(d.inputs, d.views):
        if v is not None and v.shape == x.shape and v.chunks == x.chunks:
            return (a, picks_near(a, x.chunks, v.first_element))
    return None


def _unary(name):
    def f(x, /):
        return apply(name, x)

    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` of a DArray (array API)."
    return f


def _binary(name):
    def f(x1, x2, /):
        return apply(name, x1, x2)

    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` of two DArrays or a DArray and a scalar (array API)."
    return f


FUNCTIONS = {n: _unary(n) for n in UNARY} | {n: _binary(n) for n in BINARY}


def clip(x, /, min=None, max=None):  # noqa: A002  (the standard's names)
    """Clamp every element to ``[min, max]`` (either may be None, a scalar or a DArray)."""
    if min is None and max is None:
        return astype(x, x.dtype, copy=True)
    return apply("clip", x, min, max, dtype=x.dtype)


def where(condition, x1, x2, /):
    """Elements of ``x1`` where ``condition`` is true, else of ``x2``."""
    return apply("where", condition, x1, x2)


def astype(x, dtype, /, *, copy: bool = True, device=None):
    """``x`` cast to ``dtype`` (a new array unless ``copy=False`` and nothing changes)."""
    from dgvm.array.dtypes import check

    dtype = check(dtype)
    if not copy and dtype == x.dtype:
        return x
    return apply("astype", x, dtype=dtype)

