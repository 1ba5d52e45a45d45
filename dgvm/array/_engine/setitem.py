"""``x[key] = value``: assignments run on the chunks of ``x`` in place, one task per worker.

The key says which positions of each chunk are written (``keys.plan``); the value is a
scalar, or an array broadcast over the selection (a host array is stored first), read
by each chunk's task for its own positions. A mask takes a scalar.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.keys import added_axes, fit_value, fitted, is_mask, plan, storable
from dgvm.array._engine.zero_size import empty_aware


@dataclass
class _Assign:
    """For a chunk of ``x``: the positions the key selects in it, set from the value (a
    scalar, or input 1 broadcast over the selection's shape)."""

    maps: tuple  # per axis of x: coordinate list of the selection (None: whole axis)
    sel_shape: tuple  # shape of the selection (ints dropped), the value broadcasts to it
    keep: tuple  # axes of x that are axes of the selection
    value: object
    value_shape: tuple | None

    def block_into(self, read, lo, hi, xp, target) -> bool:
        self._assign(read, lo, hi, xp, target)  # only the selected positions are written
        return True

    def block(self, read, lo, hi, xp):  # the chunk's home moved: assign into a copy
        out = read(0, lo, hi).copy()
        self._assign(read, lo, hi, xp, out)
        return out

    def _assign(self, read, lo, hi, xp, dst) -> None:
        local, sel = [], []
        for a, m in enumerate(self.maps):
            if m is None:
                local.append(np.arange(hi[a] - lo[a]))
                sel.append(np.arange(lo[a], hi[a]))
                continue
            j = np.flatnonzero((m >= lo[a]) & (m < hi[a]))
            if not len(j):
                return  # the key selects nothing in this chunk
            local.append(m[j] - lo[a])
            sel.append(j)
        if self.value_shape is None:
            value = self.value
        else:
            vsh = self.value_shape
            d = len(self.sel_shape) - len(vsh)
            coords = [sel[self.keep[i + d]] for i in range(len(vsh))]
            vlo = [0 if n == 1 else int(c.min()) for n, c in zip(vsh, coords)]
            vhi = [1 if n == 1 else int(c.max()) + 1 for n, c in zip(vsh, coords)]
            region = read(1, vlo, vhi)
            picks = [np.zeros(1, np.int64) if n == 1 else c - l for n, c, l in zip(vsh, coords, vlo)]
            value = region[xp.ix_(*(xp.asarray(p) for p in picks))] if picks else region
            value = xp.broadcast_to(value, [len(sel[a]) for a in self.keep])
            value = value.reshape([len(v) for v in local])
        dst[xp.ix_(*(xp.asarray(v) for v in local))] = value


@dataclass
class _MaskAssign:
    value: object

    def block_into(self, read, lo, hi, xp, target) -> bool:
        target[read(1, lo, hi)] = self.value
        return True

    def block(self, read, lo, hi, xp):  # the chunk's home moved: a new array
        return xp.where(read(1, lo, hi), self.value, read(0, lo, hi))


def _setitem_on_host(x, key, value):
    # Nothing to write (the target or the value has no elements): NumPy's broadcast
    # check only, on x's stand-in (read, never written).
    np.broadcast_to(value, np.shape(x[key]))


@empty_aware(host=_setitem_on_host)
def setitem(x, key, value) -> None:
    """``x[key] = value`` (``DArray.__setitem__``)."""
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
        blockwise.run(_MaskAssign(value), x, [x, mask], "setitem-mask")
        return
    maps, drop, new_axes = plan(x, key)
    keep = tuple(a for a in range(x.ndim) if a not in drop)
    sel_shape = tuple(x.shape[a] if maps[a] is None else len(maps[a]) for a in keep)
    if isinstance(value, (ArrayCore, np.ndarray)):
        value, vshape = fitted(value, sel_shape)  # a host array is checked before it is stored
        if isinstance(value, np.ndarray):
            value = type(x).from_host(np.asarray(value, dtype=x.dtype))
        if value is x:
            # The tasks write x while reading it across chunks (x[::-1] = x): read a copy,
            # deferred and so computed before the write, like any reader of x.
            value = apply("astype", value, dtype=x.dtype)
        op = _Assign(tuple(maps), sel_shape, keep, None, vshape)
        blockwise.run(op, x, [x, value], "setitem")
    else:
        storable(value, x.dtype)
        blockwise.run(_Assign(tuple(maps), sel_shape, keep, value, None), x, [x], "setitem")
