"""``x[key]`` and ``x[key] = value``: basic slicing, integer arrays along one axis, masks.

Basic indexing (slices with steps, negatives, integers, ``...``, ``None``) makes no copy:
the result is a deferred view (``dgvm.array._engine.views``) that elementwise operations and
reductions read in place, computed on first other use. Integer-array indexing is a gather
(``manipulation.take_along_maps``): each output chunk is cut from the input chunk(s) it
maps to, on its worker. A boolean mask first counts and locates the selected elements per
chunk where they live, then gathers them in C order. Assignments run on the chunks of
``x`` in place, one task per worker.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise, deferred, zero_size
from dgvm.array.darray import DArray
from dgvm.array._engine.views import View


def _expand(key, ndim: int):
    """The key as a list with one entry per axis of ``x`` (slices, ints, index arrays) and
    the positions where ``None`` adds an axis in the result."""
    key = key if isinstance(key, tuple) else (key,)
    ellipses = sum(k is Ellipsis for k in key)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices: {used} for an array of {ndim} dimensions")
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(k)
    if not ellipses:
        out.extend([slice(None)] * (ndim - used))
    return out


def _as_index_array(k):
    if isinstance(k, DArray):
        return k.to_numpy()
    if isinstance(k, (list, np.ndarray)):
        a = np.asarray(k)
        return a.astype(np.intp) if a.size == 0 and a.dtype != bool else a  # x[[]], as NumPy
    return None


def _plan(x: DArray, key):
    """(coordinate maps per axis, axes to drop, where to add axes) for a key without masks."""
    items = _expand(key, x.ndim)
    maps, drop, new_axes, axis, result_pos = [], [], [], 0, 0
    arrays = 0
    for k in items:
        if k is None:
            new_axes.append(result_pos)
            result_pos += 1
            continue
        n = x.shape[axis]
        idx = _as_index_array(k)
        if idx is not None:
            if idx.dtype == bool:
                raise IndexError("a boolean mask must be the whole key (x[mask])")
            if idx.ndim != 1 or idx.dtype.kind not in "iu":
                raise IndexError(f"integer array indices must be 1-d integer arrays, got {idx.dtype} {idx.shape}")
            arrays += 1
            if ((idx < -n) | (idx >= n)).any():
                raise IndexError(f"index out of bounds for axis {axis} of length {n}")
            maps.append(np.where(idx < 0, idx + n, idx))
            result_pos += 1
        elif isinstance(k, slice):
            r = range(n)[k]
            maps.append(None if (r.start, r.stop, r.step) == (0, n, 1) else np.asarray(r, dtype=np.int64))
            result_pos += 1
        else:
            maps.append(np.asarray([_int_index(k, axis, n)]))
            drop.append(axis)
        axis += 1
    if arrays > 1:
        raise IndexError("dgvm.array supports integer-array indexing along one axis only")
    return maps, drop, new_axes


def _is_mask(key) -> bool:
    """An array of booleans as the whole key (0-d host booleans: ``_added_axes``)."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    return (isinstance(k, DArray) and k.dtype == bool) or (isinstance(k, np.ndarray) and k.dtype == bool)


def _is_scalar_bool(k) -> bool:
    """A 0-d boolean: Python's, NumPy's, or a 0-d boolean array (host or DArray)."""
    return isinstance(k, (bool, np.bool_)) or (isinstance(k, (np.ndarray, DArray)) and k.dtype == bool and k.ndim == 0)


def _stand_in(shape) -> np.ndarray:
    """An array of ``shape`` over a single byte (zero strides): NumPy says what a basic
    index of it selects, with no memory."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), tuple(shape), (0,) * len(shape))


@dataclass
class _Added:
    """A tuple key of basic indices that adds axes: ``None``, 0-d booleans (NumPy takes
    those as advanced indices: together they add one axis, of length 1 if all are true,
    else 0, placed as an advanced index block is, with the key's integers when adjacent,
    first when not; a bool is also an int, so read as one it would pick element 1 or 0)."""

    rest: tuple  # the key without its booleans (its Nones kept)
    shape: tuple  # NumPy's selection shape for the whole key
    added: list  # the positions in it of the axes the Nones and the booleans add
    bools: int | None  # the booleans' axis (None: the key has none)
    true: bool  # all the booleans are true

    @property
    def basic(self) -> tuple:
        """The key without the indices that add axes."""
        return tuple(k for k in self.rest if k is not None)


def _added_axes(x: DArray, key, bools_only: bool = False) -> _Added | None:
    """``_Added`` for a key of basic indices with ``None`` or 0-d booleans (with
    ``bools_only``: with 0-d booleans); None for other keys (masks of arrays and index
    arrays take other paths)."""
    key = key if isinstance(key, tuple) else (key,)
    flags = [_is_scalar_bool(k) for k in key]
    if bools_only and not any(flags):
        return None
    if any(isinstance(k, (DArray, list, np.ndarray)) and not f for k, f in zip(key, flags)):
        if any(flags):
            raise IndexError("dgvm.array does not mix 0-d boolean indices with index arrays "
                             f"(key {key!r}): index with the arrays first, then with the booleans")
        return None
    if not any(flags) and not any(k is None for k in key):
        return None
    rest = tuple(k for k, f in zip(key, flags) if not f)
    _expand(rest, x.ndim)  # too many indices: dgvm's message
    # Where the added axes go depends only on the kinds of the indices and their order:
    # asked of a stand-in of 2 elements per axis, every boolean false (their axis: the one
    # of length 0, None's: those of length 1).
    probe = tuple(False if f else k if k is None or k is Ellipsis
                  else slice(None) if isinstance(k, slice) else 0 for k, f in zip(key, flags))
    kinds = _stand_in((2,) * x.ndim)[probe].shape
    bools = kinds.index(0) if any(flags) else None
    true = all(bool(k) for k, f in zip(key, flags) if f)
    shape = list(_stand_in(x.shape)[rest].shape)  # basic indices: a view, no copy
    if bools is not None:
        shape.insert(bools, 1 if true else 0)
    return _Added(rest, tuple(shape), [a for a, n in enumerate(kinds) if n <= 1], bools, true)


def _fitted(value, sel: tuple):
    """(``value``, its shape), checked to broadcast to a selection of shape ``sel`` as
    NumPy checks it, its leading length-1 axes past ``sel``'s rank dropped; a host array
    is checked before it is stored."""
    vshape = tuple(np.shape(value))
    while len(vshape) > len(sel) and vshape[0] == 1:  # NumPy drops leading length-1 axes
        value, vshape = value[0], vshape[1:]
    try:
        fits = len(vshape) <= len(sel) and tuple(np.broadcast_shapes(vshape, sel)) == sel
    except ValueError:  # NumPy's own refusal to broadcast them
        fits = False
    if not fits:
        raise ValueError(f"cannot assign a value of shape {vshape} to a selection of shape {sel}")
    return value, vshape


def _storable(value, dtype) -> None:
    """Refuse a host value that ``dtype`` cannot hold (NumPy's error)."""
    np.asarray(value).astype(dtype, casting="unsafe")


def _fit_value(value, added: _Added):
    """``value``, checked against the selection (``_fitted``), with its own copies of the
    added axes taken out, so that it broadcasts the same way to the selection of
    ``added.basic``."""
    sel = added.shape
    value, vshape = _fitted(value, sel)
    offset = len(sel) - len(vshape)
    for a in sorted(added.added, reverse=True):
        j = a - offset  # the value's axis on it, if it reaches that far
        if j >= 0 and vshape[j] == 1:
            value = value[(slice(None),) * j + (0,)]
    return value


def _int_index(k, axis: int, n: int) -> int:
    """An integer index along an axis of length ``n``, checked and made non-negative."""
    try:
        i = operator.index(k)
    except TypeError:
        raise IndexError(f"unsupported index {k!r} for axis {axis}") from None
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {axis} of length {n}")
    return i % n


def _basic(x: DArray, key):
    """A basic index (slices, integers, ``...``, ``None``) as the ``View`` it is; None for
    keys with index arrays (left to ``_plan``, which gathers them once)."""
    items, new_axes, pos = [], [], 0
    for k in _expand(key, x.ndim):
        if k is None:
            new_axes.append(pos)
            pos += 1
        elif isinstance(k, slice):
            items.append(k)
            pos += 1
        elif isinstance(k, (DArray, list, np.ndarray)):
            return None
        else:
            items.append(_int_index(k, len(items), x.shape[len(items)]))
    return View.of_key(x, items, new_axes)


def getitem(x: DArray, key) -> DArray:
    from dgvm.array.manipulation import _axis_view, take_along_maps

    added = _added_axes(x, key, bools_only=True)  # (None alone: a basic view, below)
    if added is not None:
        from dgvm.array.manipulation import expand_dims

        axis = added.bools
        out = expand_dims(getitem(x, added.rest) if added.rest else x, axis=axis)
        return out if added.true else out[(slice(None),) * axis + (slice(0, 0),)]
    if _is_mask(key):
        return _masked(x, key[0] if isinstance(key, tuple) else key)
    view = _basic(x, key)
    if view is not None:  # no copy now: a deferred view, read in place or computed on use
        return deferred.view(x, view, "getitem")
    # An index array along one axis: a gather, then the axes integers drop and None adds.
    maps, drop, new_axes = _plan(x, key)
    out = take_along_maps(x, maps, "getitem")
    if drop or new_axes:
        src = [a for a in range(x.ndim) if a not in drop]
        for pos in new_axes:
            src.insert(pos, None)
        out = _axis_view(out, tuple(src), "getitem")
    return out


# -- masks -------------------------------------------------------------------------------
@dataclass
class _Selected:
    """Per chunk of a mask: the global flat indices of its true elements."""

    shape: tuple

    def partial(self, chunk, lo, hi, xp):
        local = xp.nonzero(chunk)
        local = [v.get() if hasattr(v, "get") else v for v in local]
        coords = [v + o for v, o in zip(local, lo)]
        return np.ravel_multi_index(coords, self.shape)  # (a 0-d mask never gets here: _masked)


def selected_flat(mask: DArray) -> np.ndarray:
    """Sorted global flat indices where ``mask`` is true (computed where it lives)."""
    parts = blockwise.collect(_Selected(mask.shape), mask, "mask")
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate([np.asarray(p, dtype=np.int64).reshape(-1) for p in parts.values()]))


@dataclass
class _FlatTake:
    """Output element j is the input's element at flat index ``flat[j]``; a chunk reads the
    rows (full trailing axes) that cover its run."""

    flat: np.ndarray
    shape: tuple

    def block(self, read, lo, hi, xp):
        f = self.flat[lo[0]:hi[0]]
        row = int(np.prod(self.shape[1:], dtype=np.int64))
        r0, r1 = int(f[0]) // row, int(f[-1]) // row + 1
        slab = read(0, [r0] + [0] * (len(self.shape) - 1), [r1, *self.shape[1:]])
        return slab.reshape(-1)[xp.asarray(f - r0 * row)]


def _masked(x: DArray, mask) -> DArray:
    from dgvm.array.creation import empty, from_numpy

    if isinstance(mask, np.ndarray):
        mask = from_numpy(mask, chunks=x.chunks if mask.shape == x.shape else "auto")
    if mask.shape != x.shape:
        raise IndexError(f"boolean mask of shape {mask.shape} does not match the array's {x.shape}")
    flat = selected_flat(mask)
    if not len(flat):  # held on the caller (dgvm.array._engine.zero_size)
        return zero_size.array((0,), x.dtype, x.client)
    per = max(1, max(x.alloc.offsets[1:] - x.alloc.offsets[:-1]) // x.dtype.itemsize)
    out = empty((len(flat),), x.dtype, chunks=(int(per),))
    blockwise.run(_FlatTake(flat, x.shape), out, [x], "mask")
    return out


# -- assignment ------------------------------------------------------------------------------
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


def setitem(x: DArray, key, value) -> None:
    from dgvm.array.creation import from_numpy

    if isinstance(value, list):
        value = np.asarray(value, dtype=x.dtype)
    added = _added_axes(x, key)
    if added is not None:  # checked and lined up before a host value is stored
        value = _fit_value(value, added)
        if added.true:
            setitem(x, added.basic, value)
        elif not isinstance(value, DArray):  # selects nothing: only what could not be stored fails
            _storable(value, x.dtype)
        return
    if _is_mask(key):
        mask = key[0] if isinstance(key, tuple) else key
        if np.size(value) != 1:
            raise ValueError("x[mask] = array: dgvm.array supports a scalar or a one-element value")
        value = value.item() if isinstance(value, DArray) else np.asarray(value, dtype=x.dtype).item()
        if isinstance(mask, np.ndarray):
            mask = from_numpy(mask, chunks=x.chunks)
        if mask.shape != x.shape:
            raise IndexError(f"boolean mask of shape {mask.shape} does not match the array's {x.shape}")
        blockwise.run(_MaskAssign(value), x, [x, mask], "setitem-mask")
        return
    maps, drop, new_axes = _plan(x, key)
    keep = tuple(a for a in range(x.ndim) if a not in drop)
    sel_shape = tuple(x.shape[a] if maps[a] is None else len(maps[a]) for a in keep)
    if isinstance(value, (DArray, np.ndarray)):
        value, vshape = _fitted(value, sel_shape)  # a host array is checked before it is stored
        if isinstance(value, np.ndarray):
            value = from_numpy(np.asarray(value, dtype=x.dtype))
        if value is x:
            # The tasks write x while reading it across chunks (x[::-1] = x): read a copy,
            # deferred and so computed before the write, like any reader of x.
            value = value.astype(x.dtype, copy=True)
        op = _Assign(tuple(maps), sel_shape, keep, None, vshape)
        blockwise.run(op, x, [x, value], "setitem")
    else:
        _storable(value, x.dtype)
        blockwise.run(_Assign(tuple(maps), sel_shape, keep, value, None), x, [x], "setitem")
