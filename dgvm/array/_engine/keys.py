"""Index keys: what ``x[key]`` selects, worked out on the caller.

A key is expanded to one entry per axis (``expand_key``); a basic key (slices, integers,
``...``, ``None``) is the ``View`` it selects (``basic_view``); for an assignment, a key
with an index array is a coordinate map per axis (``plan``); ``None`` and 0-d booleans add axes
(``added_axes``); a boolean mask among basic indices is the ``MaskKey`` it makes
(``mask_key``). A value assigned to a selection is checked against it as NumPy
checks it (``fitted``). ``getitem`` and ``setitem`` act on what these say.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.placement import range_blocks
from dgvm.array._engine.views import View


def expand_key(key, ndim: int):
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
        if isinstance(k, (ArrayCore, np.ndarray)) and k.ndim == 0 and k.dtype.kind in "iu":
            k = int(k.item())  # a 0-d integer array indexes as its integer does, as in NumPy
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(k)
    if not ellipses:
        out.extend([slice(None)] * (ndim - used))
    return out


def as_index_array(k):
    """An index array of a key as it is (a DArray stays where it lives; a list becomes a
    host array), or None for other indices."""
    if isinstance(k, ArrayCore):
        return k
    if isinstance(k, (list, np.ndarray)):
        a = np.asarray(k)
        return a.astype(np.intp) if a.size == 0 and a.dtype != bool else a  # x[[]], as NumPy
    return None


def plan(x, key):
    """(coordinate maps per axis, axes to drop, where to add axes, ``front``) for a key
    without masks: the positions an assignment writes (``setitem``). ``front``: where
    the index array's axis is among the selection's (x's order), when NumPy puts it
    first instead (the key's integers and the array are not side by side), else None.
    The map of an axis indexed by a DArray of integers (not held on the caller) is that
    DArray; a slice's is a range."""
    items = expand_key(key, x.ndim)
    maps, drop, new_axes, axis, result_pos = [], [], [], 0, 0
    arrays, array_axis = 0, None
    for k in items:
        if k is None:
            new_axes.append(result_pos)
            result_pos += 1
            continue
        n = x.shape[axis]
        idx = as_index_array(k)
        if isinstance(idx, ArrayCore) and idx.host_value is not None:
            idx = idx.host_value  # its values are on the caller already
        if isinstance(idx, ArrayCore):
            # Its values stay on the workers: the axis's map is the DArray itself, which
            # ``index_assign`` reads where the chunks written are.
            if idx.dtype == bool or idx.ndim != 1 or idx.dtype.kind not in "iu":
                raise IndexError("integer array indices must be 1-d integer arrays, "
                                 f"got {idx.dtype} {tuple(idx.shape)}")
            arrays, array_axis = arrays + 1, axis
            maps.append(idx)
            result_pos += 1
        elif idx is not None:
            if idx.dtype == bool:
                raise IndexError("a boolean mask must be the whole key (x[mask])")
            if idx.ndim != 1 or idx.dtype.kind not in "iu":
                raise IndexError(f"integer array indices must be 1-d integer arrays, got {idx.dtype} {idx.shape}")
            arrays, array_axis = arrays + 1, axis
            if ((idx < -n) | (idx >= n)).any():
                raise IndexError(f"index out of bounds for axis {axis} of length {n}")
            maps.append(np.where(idx < 0, idx + n, idx))
            result_pos += 1
        elif isinstance(k, slice):
            r = range(n)[k]  # a range, not its coordinates: small in a task, whatever n
            maps.append(None if (r.start, r.stop, r.step) == (0, n, 1) else r)
            result_pos += 1
        else:
            maps.append(np.asarray([int_index(k, axis, n)]))
            drop.append(axis)
        axis += 1
    if arrays > 1:
        raise IndexError("dgvm.array supports integer-array indexing along one axis only")
    advanced = [i for i, k in enumerate(items) if not (k is None or isinstance(k, slice))]
    front = None
    if arrays and advanced != list(range(advanced[0], advanced[-1] + 1)):
        front = sum(1 for a in range(array_axis) if a not in drop)
    return maps, drop, new_axes, front


def chunks_selected(x, maps) -> list[int]:
    """The chunk indices of ``x`` (C order) holding some element that ``maps`` (``plan``'s:
    per axis the coordinates, a range or an array, or None for all) select: a write of a
    selection needs no task on the workers of the other chunks."""
    blocks = []
    for a, m in enumerate(maps):
        if m is None:
            blocks.append(np.arange(len(x.chunks[a])))
        elif isinstance(m, range):
            blocks.append(np.array(sorted(b for b, _ in range_blocks(x.chunks[a], m)), dtype=np.intp))
        else:
            blocks.append(np.unique(np.searchsorted(np.cumsum(x.chunks[a]), np.asarray(m), side="right")))
    if not blocks:
        return [0]
    grid = np.meshgrid(*blocks, indexing="ij")
    return np.ravel_multi_index([g.reshape(-1) for g in grid], x.numblocks).tolist()


def _bool_array(k):
    """``k`` as a boolean array of at least one axis (a DArray as it is, a host array or
    a list of booleans as a host array), or None."""
    if isinstance(k, list):
        a = np.asarray(k)
        return a if a.dtype == bool and a.ndim else None
    if isinstance(k, (ArrayCore, np.ndarray)) and k.dtype == bool and k.ndim:
        return k
    return None


@dataclass
class MaskKey:
    """A key with one boolean mask among basic indices (NumPy: the mask stands for the
    integer arrays of its true positions, one per axis it covers). ``x[key]`` is
    ``x[basic]`` (a view), then the mask along the view's axes ``axis ..
    axis + mask.ndim``; the axis of the selected elements goes first when NumPy puts
    it there (``front``: the key's integers and the mask are not side by side)."""

    mask: object  # a DArray or a host array of booleans
    basic: tuple  # the key with the mask's axes as ``slice(None)``
    at: int  # where the mask's axes start in ``basic``
    first: int  # the first of the mask's axes in x
    axis: int  # the first of the mask's axes in ``x[basic]``
    front: bool
    whole: bool  # ``x[basic]`` is all of x, as it is


def mask_key(x, key) -> MaskKey | None:
    """``MaskKey`` for a key with a boolean array of one axis or more; None for other
    keys. NumPy's IndexError for a mask whose shape does not match the axes it covers,
    or for too many indices."""
    key = key if isinstance(key, tuple) else (key,)
    bools = [i for i, k in enumerate(key) if _bool_array(k) is not None]
    if not bools:
        return None
    others = [k for i, k in enumerate(key) if i not in bools and not _is_scalar_bool(k)]
    if len(bools) > 1 or any(as_index_array(k) is not None for k in others):
        raise IndexError("dgvm.array supports one index array or boolean mask per key")
    if len(others) + 1 < len(key):
        raise IndexError("dgvm.array does not mix 0-d boolean indices with boolean masks "
                         f"(key {key!r}): index with the mask first, then with the booleans")
    mask = _bool_array(key[bools[0]])
    k = mask.ndim
    if sum(e is Ellipsis for e in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for e in key if e is not None and e is not Ellipsis) - 1 + k
    if used > x.ndim:
        raise IndexError(f"too many indices for array: array is {x.ndim}-dimensional, but {used} were indexed")
    items, at = [], None  # the key expanded, the mask as ``k`` entries of ``slice(None)``
    for i, e in enumerate(key):
        if e is Ellipsis:
            items.extend([slice(None)] * (x.ndim - used))
        elif i == bools[0]:
            at = len(items)
            items.extend([slice(None)] * k)
        elif isinstance(e, (ArrayCore, np.ndarray)) and e.ndim == 0 and e.dtype.kind in "iu":
            items.append(int(e.item()))  # as its integer, as in NumPy
        else:
            items.append(e)
    if not any(e is Ellipsis for e in key):
        items.extend([slice(None)] * (x.ndim - used))
    first = sum(1 for e in items[:at] if e is not None)  # x's axis of the mask's first
    for d in range(k):
        if mask.shape[d] != x.shape[first + d]:
            raise IndexError(f"boolean index did not match indexed array along axis {first + d}; size of axis "
                             f"is {x.shape[first + d]} but size of corresponding boolean axis is {mask.shape[d]}")
    advanced = sorted([i for i, e in enumerate(items) if not (e is None or isinstance(e, slice))]
                      + list(range(at, at + k)))
    front = advanced != list(range(advanced[0], advanced[-1] + 1))
    axis = sum(1 for e in items[:at] if e is None or isinstance(e, slice))
    whole = all(isinstance(e, slice) and e == slice(None) for e in items)
    return MaskKey(mask, tuple(items), at, first, axis, front, whole)


def is_mask(key) -> bool:
    """An array of booleans as the whole key (0-d host booleans: ``added_axes``)."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    return (isinstance(k, ArrayCore) and k.dtype == bool) or (isinstance(k, np.ndarray) and k.dtype == bool)


def _is_scalar_bool(k) -> bool:
    """A 0-d boolean: Python's, NumPy's, or a 0-d boolean array (host or DArray)."""
    return isinstance(k, (bool, np.bool_)) or (isinstance(k, (np.ndarray, ArrayCore)) and k.dtype == bool and k.ndim == 0)


def _stand_in(shape) -> np.ndarray:
    """An array of ``shape`` over a single byte (zero strides): NumPy says what a basic
    index of it selects, with no memory."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), tuple(shape), (0,) * len(shape))


@dataclass
class Added:
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


def added_axes(x, key, bools_only: bool = False) -> Added | None:
    """``Added`` for a key of basic indices with ``None`` or 0-d booleans (with
    ``bools_only``: with 0-d booleans); None for other keys (masks of arrays and index
    arrays take other paths)."""
    key = key if isinstance(key, tuple) else (key,)
    flags = [_is_scalar_bool(k) for k in key]
    if bools_only and not any(flags):
        return None
    if any(isinstance(k, (ArrayCore, list, np.ndarray)) and not f for k, f in zip(key, flags)):
        if any(flags):
            raise IndexError("dgvm.array does not mix 0-d boolean indices with index arrays "
                             f"(key {key!r}): index with the arrays first, then with the booleans")
        return None
    if not any(flags) and not any(k is None for k in key):
        return None
    rest = tuple(k for k, f in zip(key, flags) if not f)
    expand_key(rest, x.ndim)  # too many indices: dgvm's message
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
    return Added(rest, tuple(shape), [a for a, n in enumerate(kinds) if n <= 1], bools, true)


def fitted(value, sel: tuple):
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


def storable(value, dtype) -> None:
    """Refuse a host value that ``dtype`` cannot hold (NumPy's error)."""
    np.asarray(value).astype(dtype, casting="unsafe")


def fit_value(value, added: Added):
    """``value``, checked against the selection (``fitted``), with its own copies of the
    added axes taken out, so that it broadcasts the same way to the selection of
    ``added.basic``."""
    sel = added.shape
    value, vshape = fitted(value, sel)
    offset = len(sel) - len(vshape)
    for a in sorted(added.added, reverse=True):
        j = a - offset  # the value's axis on it, if it reaches that far
        if j >= 0 and vshape[j] == 1:
            value = value[(slice(None),) * j + (0,)]
    return value


def int_index(k, axis: int, n: int) -> int:
    """An integer index along an axis of length ``n``, checked and made non-negative."""
    try:
        i = operator.index(k)
    except TypeError:
        raise IndexError(f"unsupported index {k!r} for axis {axis}") from None
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {axis} of length {n}")
    return i % n


def basic_view(x, key):
    """A basic index (slices, integers, ``...``, ``None``) as the ``View`` it is; None for
    keys with index arrays (left to ``getitem``'s gather and ``setitem``'s ``plan``)."""
    items, new_axes, pos = [], [], 0
    for k in expand_key(key, x.ndim):
        if k is None:
            new_axes.append(pos)
            pos += 1
        elif isinstance(k, slice):
            items.append(k)
            pos += 1
        elif isinstance(k, (ArrayCore, list, np.ndarray)):
            return None
        else:
            items.append(int_index(k, len(items), x.shape[len(items)]))
    return View.of_key(x, items, new_axes)
