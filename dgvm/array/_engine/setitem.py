"""``x[key] = value``: assignments run on the chunks of ``x`` in place, one task per worker.

The key says which positions of each chunk are written (``keys.plan``); the value is a
scalar, or an array broadcast over the selection (a host array is stored first), read
by each chunk's task for its own positions. A mask takes a scalar.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.assign_ops import Assign, MaskAssign
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.aliases import view_of
from dgvm.array._engine.keys import (added_axes, basic_view, chunks_selected, fit_value, fitted, is_mask, plan,
                                     storable)
from dgvm.array._engine.view_writes import write_view
from dgvm.array._engine.zero_size import empty_aware


def _setitem_on_host(x, key, value):
    # Nothing to write (the target or the value has no elements): NumPy's broadcast
    # check only, on x's stand-in (read, never written).
    np.broadcast_to(value, np.shape(x[key]))


@empty_aware(host=_setitem_on_host)
def setitem(x, key, value) -> None:
    """``x[key] = value`` (``DArray.__setitem__``)."""
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
    if is_mask(key):
        mask = key[0] if isinstance(key, tuple) else key
        if np.size(value) != 1:
            raise ValueError("x[mask] = array: dgvm.array supports a scalar or a one-element value")
        value = value.item() if isinstance(value, ArrayCore) else np.asarray(value, dtype=x.dtype).item()
        if isinstance(mask, np.ndarray):
            mask = type(x).from_host(mask, chunks=x.chunks)
        if mask.shape != x.shape:
            raise IndexError(f"boolean mask of shape {mask.shape} does not match the array's {x.shape}")
        blockwise.run(MaskAssign(value), x, [x, mask], "setitem-mask")
        return
    maps, drop, new_axes = plan(x, key)
    keep = tuple(a for a in range(x.ndim) if a not in drop)
    # One task per worker of the chunks written, none elsewhere (an empty selection: every
    # chunk's, writing nothing, so that x's earlier writers stay ordered before later tasks).
    chunks = chunks_selected(x, maps) or None
    sel_shape = tuple(x.shape[a] if maps[a] is None else len(maps[a]) for a in keep)
    if isinstance(value, (ArrayCore, np.ndarray)):
        value, vshape = fitted(value, sel_shape)  # a host array is checked before it is stored
        if isinstance(value, np.ndarray):
            value = type(x).from_host(np.asarray(value, dtype=x.dtype))
        if value is x:
            # The tasks write x while reading it across chunks (x[::-1] = x): read a copy,
            # deferred and so computed before the write, like any reader of x.
            value = apply("astype", value, dtype=x.dtype)
        op = Assign(tuple(maps), sel_shape, keep, None, vshape)
        blockwise.run(op, x, [x, value], "setitem", chunks)
    else:
        storable(value, x.dtype)
        blockwise.run(Assign(tuple(maps), sel_shape, keep, value, None), x, [x], "setitem", chunks)


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
