"""``x[key] = value``: assignments run on the chunks of ``x`` in place, one task per worker.

The key says which positions of each chunk are written (``keys.plan``); the value is a
scalar, or an array broadcast over the selection (a host array is stored first), read
by each chunk's task for its own positions. An axis indexed by a DArray of integers is
written where the chunks live, each reading the indices that fall in it
(``index_assign``); a boolean mask, by the values laid out in C order of its true
positions (``mask_assign``); a 1-d mask along one axis of a larger array, as the
positions it stands for (``mask_select.positions``).
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import read_while_written
from dgvm.array._engine.assign_ops import Assign
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.aliases import view_of
from dgvm.array._engine.index_assign import assign_indexed
from dgvm.array._engine.keys import (added_axes, basic_view, chunks_selected, fit_value, fitted, is_mask, mask_key,
                                     plan, storable)
from dgvm.array._engine.mask_assign import assign_masked
from dgvm.array._engine.mask_select import count_true, positions
from dgvm.array._engine.view_writes import run_assign, write_view
from dgvm.array._engine.views import View
from dgvm.array._engine.zero_size import empty_aware


def _setitem_on_host(x, key, value):
    # Nothing to write (the target or the value has no elements): NumPy's broadcast
    # check only, on x's stand-in (read, never written).
    np.broadcast_to(value, np.shape(x[key]))


def setitem(x, key, value) -> None:
    """``x[key] = value`` (``DArray.__setitem__``)."""
    if isinstance(value, ArrayCore) and value.size == 0 and x.size:
        mk = mask_key(x, key)
        if mk is not None and isinstance(mk.mask, ArrayCore) and mk.mask.size:
            # NumPy's checks of a value with no elements need the mask's true elements,
            # not its stand-in's (none): the value, held on the caller, goes the common way.
            value = np.empty(value.shape, value.dtype)
    _setitem(x, key, value)


@empty_aware(host=_setitem_on_host)
def _setitem(x, key, value) -> None:
    if x.alias is not None:
        _setitem_view(x, key, value)
        return
    if isinstance(value, list):
        value = np.asarray(value, dtype=x.dtype)
    added = added_axes(x, key)
    if added is not None:  # checked and lined up before a host value is stored
        value = fit_value(value, added)
        if added.true:
            setitem(x, added.basic, value)
        elif not isinstance(value, ArrayCore):  # selects nothing: only what could not be stored fails
            storable(value, x.dtype)
        return
    mk = mask_key(x, key)
    if mk is not None:
        # A mask of every axis alone: NumPy takes values of 0 or 1 dimensions only.
        _setitem_mask(x, mk, value, alone=is_mask(key) and mk.mask.ndim == x.ndim)
        return
    maps, drop, new_axes, front = plan(x, key)
    keep = tuple(a for a in range(x.ndim) if a not in drop)
    sel_shape = tuple(x.shape[a] if maps[a] is None else len(maps[a]) for a in keep)
    if front and isinstance(value, (ArrayCore, np.ndarray)):
        # NumPy's selection has the index array's axis first: the value's, put in x's order.
        value, _ = fitted(value, (sel_shape[front],) + sel_shape[:front] + sel_shape[front + 1:])
        value = _first_axis_to(value, len(sel_shape), front)
    indexed = [a for a, m in enumerate(maps) if isinstance(m, ArrayCore)]
    vshape = None
    if isinstance(value, (ArrayCore, np.ndarray)):
        value, vshape = fitted(value, sel_shape)  # a host array is checked before it is stored
        if isinstance(value, np.ndarray):
            value = type(x).from_host(np.asarray(value, dtype=x.dtype))
        value = read_while_written(value, x)
    else:
        storable(value, x.dtype)
    if indexed:  # the indices stay on the workers
        assign_indexed(x, maps, indexed[0], keep, sel_shape, value, vshape)
        return
    # One task per worker of the chunks written, none elsewhere (an empty selection: every
    # chunk's, writing nothing, so that x's earlier writers stay ordered before later tasks).
    chunks = chunks_selected(x, maps) or None
    if vshape is not None:
        run_assign(x, maps, sel_shape, keep, value, chunks)
    else:
        blockwise.run(Assign(tuple(maps), sel_shape, keep, value, None), x, [x], "setitem", chunks)


def _first_axis_to(value, ndim: int, pos: int):
    """``value`` (which broadcasts to a shape of ``ndim`` axes) with its axes made
    ``ndim`` (new leading axes of length 1) and its first moved to ``pos``: a view for
    a DArray."""
    if not isinstance(value, ArrayCore):
        value = np.asarray(value)
        return np.moveaxis(value.reshape((1,) * (ndim - value.ndim) + value.shape), 0, pos)
    src = [None] * (ndim - value.ndim) + list(range(value.ndim))
    src.insert(pos, src.pop(0))
    return view_of(value, View.of_axes(value, tuple(src)), "setitem")


def _setitem_mask(x, mk, value, alone: bool) -> None:
    """``x[key] = value`` for a key with a boolean mask (``keys.MaskKey``)."""
    if mk.mask.ndim == 1 and x.ndim > 1:  # along one axis: the positions it stands for
        key = list(mk.basic)
        key[mk.at] = positions(mk.mask, x.shape[mk.first], mk.first)
        setitem(x, tuple(key), value)
        return
    if isinstance(value, list):
        value = np.asarray(value)
    if mk.whole:
        assign_masked(x, mk.mask, mk.axis, value, alone)
        return
    # Other indices beside it: the mask in the view they select (a copy of it, written
    # through whole).
    target = view_of(x, basic_view(x, mk.basic), "setitem")
    k = mk.mask.ndim
    if mk.front and mk.axis and isinstance(value, (ArrayCore, np.ndarray)):
        # NumPy's selection has the mask's axis first: the value's, put in the view's order.
        rest = target.shape[:mk.axis] + target.shape[mk.axis + k:]
        value, _ = fitted(value, (count_true(mk.mask),) + rest)
        value = _first_axis_to(value, len(rest) + 1, mk.axis)
    if target.alias is None:  # it has no elements (zero_size): NumPy's checks only
        shape = target.shape[:mk.axis] + (count_true(mk.mask),) + target.shape[mk.axis + k:]
        if not isinstance(value, ArrayCore) or value.size:
            np.broadcast_to(np.empty(np.shape(value)), shape)
        return
    copy = target.alias.copy_of(target)
    assign_masked(copy, mk.mask, mk.axis, value, alone=False)
    write_view(target, copy)


def _setitem_view(x, key, value) -> None:
    """``x[key] = value`` for a view ``x``: written through to its base (``view_writes``).
    A basic key selects a view of the view; any other key is applied to a copy of the
    view's values, which is then written through whole."""
    if x.alias.readonly:
        raise ValueError("assignment destination is read-only")
    if key is Ellipsis or (isinstance(key, tuple) and not key):
        write_view(x, value)
        return
    strided = x.alias.view is not None
    view = None
    if strided and not is_mask(key) and added_axes(x, key, bools_only=True) is None:
        view = basic_view(x, key)
    if view is not None:
        target = view_of(x, view, "setitem")
        if target.alias is None:  # it selects nothing (zero_size): NumPy's checks only
            _setitem_on_host(target, (), value)
            return
        write_view(target, value)
        return
    copy = x.alias.copy_of(x)
    setitem(copy, key, value)
    write_view(x, copy)
