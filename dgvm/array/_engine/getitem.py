"""``x[key]``: basic slicing, integer arrays along one axis, masks.

Basic indexing (slices with steps, negatives, integers, ``...``, ``None``) makes no copy:
the result is a deferred view (``views``) that elementwise operations and reductions
read in place, computed on first other use. Integer-array indexing is a gather
(``gather.take_along_maps``): each output chunk is cut from the input chunk(s) it maps
to, on its worker. A boolean mask first counts and locates the selected elements per
chunk where they live, then gathers them in C order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.aliases import view_of
from dgvm.array._engine.apply import apply
from dgvm.array._engine.gather import take_along_maps
from dgvm.array._engine.keys import added_axes, basic_view, is_mask, plan
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
    if is_mask(key):
        return _masked(x, key[0] if isinstance(key, tuple) else key)
    view = basic_view(x, key)
    if view is not None:  # no copy: a view of x's memory, read in place
        out = view_of(x, view, "getitem")
        if out.ndim == 0 and not _has_ellipsis(key) and out.alias is not None:
            # An integer per axis: NumPy's result is a scalar, the value of now, not a
            # view (still read from the chunks in place, and only if used).
            return out.alias.copy_of(out)
        return out
    # An index array along one axis: a gather, then the axes integers drop and None adds.
    maps, drop, new_axes = plan(x, key)
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


def selected_flat(mask) -> np.ndarray:
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


def _masked(x, mask):
    if isinstance(mask, np.ndarray):
        mask = type(x).from_host(mask, chunks=x.chunks if mask.shape == x.shape else "auto")
    if mask.shape != x.shape:
        raise IndexError(f"boolean mask of shape {mask.shape} does not match the array's {x.shape}")
    flat = selected_flat(mask)
    if not len(flat):  # held on the caller (zero_size)
        return type(x).empty_on_caller((0,), x.dtype, x.client)
    per = max(1, max(x.alloc.offsets[1:] - x.alloc.offsets[:-1]) // x.dtype.itemsize)
    out = type(x).allocated((len(flat),), x.dtype, chunks=(int(per),))
    blockwise.run(_FlatTake(flat, x.shape), out, [x], "mask")
    return out
