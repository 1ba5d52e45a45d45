"""``x[key]``: basic slicing, integer arrays along one axis, boolean masks.

Basic indexing (slices with steps, negatives, integers, ``...``, ``None``) makes no copy:
the result is a deferred view (``views``) that elementwise operations and reductions
read in place, computed on first other use. Integer-array indexing is a gather on the
workers (``index_gather``): the indices, a DArray or a host array stored once, never
come to the caller. A boolean mask is counted and compacted where its chunks live, and
the pieces laid out in C order there (``mask_select``); a mask of some of the axes is
first repeated along the others there, and the result laid out in NumPy's shape.
"""

from __future__ import annotations

from dgvm.array._engine.aliases import view_of
from dgvm.array._engine.apply import apply
from dgvm.array._engine.index_gather import check_indices, gather_along
from dgvm.array._engine.keys import added_axes, as_index_array, basic_view, expand_key, mask_key
from dgvm.array._engine.mask_select import masked_along, positions
from dgvm.array._engine.views import View


def _axis_view(x, src: tuple, name: str):
    """``x`` with view axis k reading axis ``src[k]`` (None: a new axis of length 1)."""
    return view_of(x, View.of_axes(x, src), name)


def _has_ellipsis(key) -> bool:
    return any(k is Ellipsis for k in (key if isinstance(key, tuple) else (key,)))


def getitem(x, key):
    """``x[key]`` (``DArray.__getitem__``)."""
    added = added_axes(x, key, bools_only=True)  # (None alone: a basic view, below)
    if added is not None:
        axis = added.bools
        inner = getitem(x, added.rest) if added.rest else x
        src = list(range(inner.ndim))
        src.insert(axis, None)
        out = _axis_view(inner, tuple(src), "expand_dims")
        if not added.true:
            return out[(slice(None),) * axis + (slice(0, 0),)]
        # A 0-d boolean is an advanced index: NumPy's result is a copy, not a view.
        return apply("astype", out, dtype=out.dtype)
    mk = mask_key(x, key)  # NumPy's IndexError for a mask that does not fit
    if mk is not None:
        if mk.mask.ndim == 1 and x.ndim > 1:  # along one axis: the positions it selects
            return _indexed(x, key)
        return _masked(x, mk)
    view = basic_view(x, key)
    if view is not None:  # no copy: a view of x's memory, read in place
        out = view_of(x, view, "getitem")
        if out.ndim == 0 and not _has_ellipsis(key) and out.alias is not None:
            # An integer per axis: NumPy's result is a scalar, the value of now, not a
            # view (still read from the chunks in place, and only if used).
            return out.alias.copy_of(out)
        return out
    return _indexed(x, key)


# -- a boolean mask ------------------------------------------------------------------------
def _masked(x, mk):
    """A key with a boolean mask (``keys.MaskKey``): its basic indices first (a view),
    then the mask along the view's axes it covers (``mask_select.masked_along``)."""
    inner = x if mk.whole else getitem(x, mk.basic)
    out = masked_along(inner, mk.mask, mk.axis)
    if mk.front and mk.axis:  # NumPy puts the selected elements' axis first
        src = list(range(out.ndim))
        src.insert(0, src.pop(mk.axis))
        out = _axis_view(out, tuple(src), "getitem")
    return out


# -- an integer index array --------------------------------------------------------------
def _indexed(x, key):
    """A key with one integer index array (a DArray or host array; a 1-d boolean array
    stands for the positions of its true elements): its basic indices first (a view),
    then a gather along the array's axis (``index_gather``). As in NumPy, the integers of
    the key index with the array; when they and it are not side by side, the gathered
    axis comes first."""
    items = expand_key(key, x.ndim)
    arrays = [i for i, k in enumerate(items) if as_index_array(k) is not None]
    if len(arrays) > 1:
        raise IndexError("dgvm.array supports integer-array indexing along one axis only")
    pos = arrays[0]
    idx = as_index_array(items[pos])
    axis = sum(1 for k in items[:pos] if k is None or isinstance(k, slice))
    if idx.dtype == bool:
        if idx.ndim != 1:
            raise IndexError("a boolean mask of more than one dimension must be the whole key "
                             f"(x[mask], of x's shape), got one of shape {tuple(idx.shape)}")
        idx = positions(idx, x.shape[sum(1 for k in items[:pos] if k is not None)], axis)
    check_indices(idx, "integer array indices")
    basic = [slice(None) if i == pos else k for i, k in enumerate(items)]
    advanced = [i for i, k in enumerate(items) if i == pos or not (k is None or isinstance(k, slice))]
    plain = all(isinstance(k, slice) and k == slice(None) for k in basic)
    out = gather_along(x if plain else getitem(x, tuple(basic)), axis, idx, "getitem")
    if axis and advanced != list(range(advanced[0], advanced[-1] + 1)):
        src = list(range(out.ndim))
        src.insert(0, src.pop(axis))
        out = _axis_view(out, tuple(src), "getitem")
    return out

