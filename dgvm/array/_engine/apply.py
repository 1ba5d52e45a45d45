"""Elementwise operations over arrays, with broadcasting: each makes a deferred array.

Each call makes one new *deferred* array: an expression tree (``trees``) over the arrays
it reads, into which later elementwise calls inline (``deferred``). When the values are
needed the tree runs as one operation (``ArrayCore.materialize``): one allocation
(colocated with a leaf of the result's shape and chunks), one task per worker, one pass
per chunk (``fused``: a ``cupy.fuse`` kernel on ``cuda``, cache-sized NumPy tiles on
``cpu``). Result dtypes are decided on the caller with NumPy's rules, which are the
standard's. The functions of ``dgvm.array.elementwise`` and DArray's operators are this.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from dgvm.array._engine import blockwise, deferred, lineage
from dgvm.array._engine.aliases import view_of
from dgvm.array._engine.axes import broadcast_chunks
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.deferred import Deferred
from dgvm.array._engine.tree_op import Elementwise
from dgvm.array._engine.trees import call
from dgvm.array._engine.view_writes import write_view


def _probe(x):
    """A one-element NumPy stand-in for an argument, for dtype rules."""
    if isinstance(x, ArrayCore):
        return np.ones(1, dtype=x.dtype)
    return x


def result_dtype(name: str, args) -> np.dtype:
    """The dtype NumPy gives ``name`` on these arguments; NumPy's TypeError if it refuses."""
    key = [name]
    for a in args:
        if isinstance(a, ArrayCore):
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


# result_dtype's answers: a pure cache of NumPy's rules (a few hundred kinds of call at
# most), the same for every client, so per process.
_DTYPES: dict = {}


def _numpy_result_dtype(name: str, args) -> np.dtype:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        dtype = np.asarray(call(np, name, [_probe(a) for a in args])).dtype
    # NumPy answers float16 for some functions of small integers and bools; dgvm.array
    # has no float16 (the standard does not either), so those results are float32.
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _leaf(a, inputs: list, views: list, sources: list):
    if isinstance(a, ArrayCore):
        return deferred.leaf(a, inputs, views, sources)
    if a is None or isinstance(a, (bool, int, float, complex, np.generic)):
        return ("const", a)
    raise TypeError(f"dgvm.array: expected a DArray or a Python scalar, got {type(a).__name__}")


def apply(name: str, *args, dtype=None, out=None):
    """``name`` elementwise over ``args`` (arrays and scalars): a new deferred array, of
    the class of the first array (computed, fused with the elementwise operations that
    follow, when first needed), or into ``out`` in place."""
    arrays = [a for a in args if isinstance(a, ArrayCore)]
    if not arrays:
        raise TypeError(f"dgvm.array.{name} needs at least one DArray argument")
    try:
        shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        raise ValueError(f"dgvm.array.{name}: shapes {[a.shape for a in arrays]} do not broadcast together") from None
    dtype = np.dtype(dtype) if dtype is not None else result_dtype(name, args)
    if out is not None and out.shape != shape:
        raise ValueError(f"in-place {name}: the result's shape {shape} is not the array's {out.shape}")
    if math.prod(shape) == 0:  # no element to compute (zero_size)
        return out if out is not None else type(arrays[0]).empty_on_caller(shape, dtype, arrays[0].client)
    if out is not None and out.alias is not None:  # in place on a view: its base is written
        write_view(out, apply(name, *args, dtype=dtype))
        return out
    if all(a.host_value is not None for a in arrays) and (out is None or out.host_value is not None):
        return _on_caller(name, args, dtype, out, arrays[0])
    deferred.reread(arrays)  # a result computed before is not computed again by this tree
    if out is not None and out.deferred is None:
        lineage.recover([out])  # lost chunks made again before the write ends its lineage
        # Deferred results that read out's present values (x * 2 in x += x * 2, x.T in
        # x += x.T) are computed before out is written: once, and the tree reads them.
        out.before_write()
    inputs: list = []
    views: list = []
    sources: list = []
    expr = ("call", name, [_leaf(a, inputs, views, sources) for a in args], dtype)
    sources = list({id(r): r for r in sources}.values())  # (CPython gives one ref per record)
    if out is None:
        tree = Deferred(expr, inputs, name, views, sources=sources)
        return type(arrays[0]).of_deferred(shape, dtype, broadcast_chunks(arrays, shape), tree)
    # In place keeps the array's dtype: the standard's rule for ``x += y``.
    expr = ("call", "astype", [expr], out.dtype)
    if out.deferred is not None:  # nothing computed yet: the tree grows instead
        out.undefer()
        out.defer(Deferred(expr, inputs, name, views, sources=sources))
        return out
    for i, (a, v) in enumerate(zip(inputs, views)):
        if a is out and v is not None:
            # out read in other positions than it is written (x += x.T, x -= x[3]): those
            # leaves read a copy taken before the write, as NumPy does for overlapping operands.
            inputs[i], views[i] = view_of(out, v, name).stored(), None
    blockwise.run(Elementwise.of(expr, inputs, views, shape), out, inputs, name)
    return out


def _on_caller(name, args, dtype, out, like):
    """``name`` over host values (and scalars), computed here with NumPy."""
    values = [a.host_value if isinstance(a, ArrayCore) else a for a in args]
    with np.errstate(all="ignore"):
        value = np.asarray(call(np, name, values)).astype(dtype if out is None else out.dtype)
    if out is None:
        return type(like).on_caller(value, like.client, name)
    out.hold(value, like.client, name)
    return out


def read_while_written(value, x):
    """``value`` as an input of a write to ``x``: when it is ``x`` itself (``x[::-1] = x``,
    ``x[x] = ...``), whose tasks read across the chunks the write changes, a copy,
    deferred and so computed before the write like any reader of ``x``."""
    return apply("astype", value, dtype=value.dtype) if value is x else value
