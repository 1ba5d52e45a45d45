"""Writes through views: ``v[...] = w`` writes the elements of ``v``'s base that ``v`` shows.

The view's ``View`` says, per axis of the base, which coordinates it covers; the value is
lined up with the base's axes (the view's new axes dropped, its permutation undone) and
written by one ``Assign`` on the base's chunks, one task per worker of the chunks the view
covers. A value that reads the same base (``x[1:] = x[:-1]``, ``x[:] = x[::-1]``) is read
from a copy taken before the write (``ArrayCore.stored``), so overlapping assignments give
NumPy's result.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise, deferred, lineage
from dgvm.array._engine.aliases import view_of, whole
from dgvm.array._engine.assign_ops import Assign, AssignTree
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.keys import chunks_selected, fitted, storable
from dgvm.array._engine.tree_op import Elementwise
from dgvm.array._engine.views import View, walk


def write_view(target, value) -> None:
    """``target[...] = value`` for a view ``target``: its base's elements are written."""
    alias = target.alias
    base, v = alias.base, alias.view
    lineage.recover([target])  # its base's lost chunks made again before the write ends its lineage
    target.before_write()  # a read-only view refuses here
    if isinstance(value, list):
        value = np.asarray(value, dtype=base.dtype)
    if v is None:  # a derived view: its new values, whole, go back to its source
        fitted(value, target.shape)
        values = alias.copy_of(target)
        values[...] = value
        alias.write_back(alias.source, values)
        return
    value, vshape = fitted(value, target.shape)
    if isinstance(value, ArrayCore) and value.ndim == 0 and value.host_value is not None:
        value = value.host_value[()]  # a number on the caller: written as a scalar
    maps, keep = _maps(base, v)
    sel = tuple(base.shape[a] if maps[a] is None else len(maps[a]) for a in keep)
    if not isinstance(value, (ArrayCore, np.ndarray)):
        storable(value, base.dtype)
        blockwise.run(Assign(tuple(maps), sel, tuple(keep), value, None), base, [base], "setitem",
                      chunks_selected(base, maps))
        return
    value = _lined_up(value, v, len(target.shape) - len(vshape))
    if isinstance(value, np.ndarray):
        value = type(base).from_host(np.array(value, dtype=base.dtype, order="C"))  # (0-d stays 0-d)
    elif value is base:  # read from a copy: the write changes what it reads
        value = whole(value)
    run_assign(base, maps, sel, tuple(keep), value, chunks_selected(base, maps))


def run_assign(x, maps, sel_shape, keep, value, chunks) -> None:
    """Write ``value`` (an array broadcast over the selection) into the positions ``maps``
    select of ``x``: a deferred elementwise ``value`` that does not read ``x`` is computed
    chunk by chunk as it is written (``AssignTree``), never stored."""
    if isinstance(value, ArrayCore):
        deferred.reread([value])
    tree = _fusable(value, x)
    if tree is not None:
        d = value.deferred
        deferred.evaluated(d)
        op = AssignTree(tuple(maps), sel_shape, keep, None, value.shape, tree, value.dtype.str)
        blockwise.run(op, x, [x, *d.inputs], "setitem", chunks)
        return
    if isinstance(value, ArrayCore) and value.alias is None and value is not x and value.size:
        # A stored value (computed now if deferred, before x is written) as a one-leaf
        # tree: each chunk copies its part straight from the value's chunks that hold it
        # (``Elementwise.boxes``), never gathered first.
        value = value.stored()
        tree = Elementwise(("in", 0), [tuple(value.shape)], tuple(value.shape), [None])
        op = AssignTree(tuple(maps), sel_shape, keep, None, value.shape, tree, value.dtype.str)
        blockwise.run(op, x, [x, value], "setitem", chunks)
        return
    blockwise.run(Assign(tuple(maps), sel_shape, keep, None, value.shape), x, [x, value], "setitem", chunks)


def _fusable(value, x):
    """The tree of ``value`` when it is a deferred elementwise array over arrays that
    own their memory, none of them ``x`` (whose chunks the write changes while others are
    read); else None."""
    d = value.deferred if isinstance(value, ArrayCore) else None
    if d is None or d.host is not None or value.alias is not None or value.is_stored:
        return None
    if any(a is x or not isinstance(a, ArrayCore) or a.alias is not None for a in d.inputs):
        return None
    return Elementwise.of(d.expr, d.inputs, d.views, value.shape)


def _maps(base, v: View):
    """Per axis of the base, the coordinates the view covers (a range; None: all of it; one
    coordinate for an axis an integer fixed), and the base axes the view walks, in order."""
    maps, keep = [], []
    for a in range(base.ndim):
        if a not in v.axes:
            maps.append(np.asarray([v.start[a]], dtype=np.int64))
            continue
        n = v.shape[v.axes.index(a)]
        whole_axis = v.start[a] == 0 and v.step[a] == 1 and n == base.shape[a]
        maps.append(None if whole_axis else walk(v.start[a], v.step[a], n))
        keep.append(a)
    return maps, keep


def _lined_up(value, v: View, pad: int):
    """``value`` (broadcastable to the view's shape, ``pad`` axes short of it) with one
    axis per base axis the view walks, in the base's order (length 1 where it broadcasts)."""
    drop = tuple(0 if a is None else slice(None) for a in v.axes)  # the view's new axes
    walked = [a for a in v.axes if a is not None]
    order = tuple(sorted(range(len(walked)), key=walked.__getitem__))
    if isinstance(value, np.ndarray):
        return np.asarray(value.reshape((1,) * pad + value.shape)[drop]).transpose(order)
    if pad:
        value = view_of(value, View.of_axes(value, (None,) * pad + tuple(range(value.ndim))), "setitem")
    if any(a is None for a in v.axes):
        keep = tuple(k for k, a in enumerate(v.axes) if a is not None)
        value = view_of(value, View.of_axes(value, keep), "setitem")
    if order != tuple(range(len(order))):
        value = view_of(value, View.of_axes(value, order), "setitem")
    return value
