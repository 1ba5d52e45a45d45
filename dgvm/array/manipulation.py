"""Manipulation functions: transpose, reshape, broadcast, concatenate, flip, roll, repeat, ...

Axis permutations, ``expand_dims``, ``squeeze`` and ``flip`` are views of their input's
memory, as in NumPy (``_engine.aliases``). The others are blockwise
ops: an output chunk is made on its worker from the input regions it maps to (read
through the migration layer), and placed near the input chunk that holds its first
element, so a flip, a roll or a broadcast mostly reads local chunks
(``_engine.gather``, ``_engine.layout_ops``).
"""

from __future__ import annotations

import builtins
import itertools

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.aliases import derived, stand_in, view_of
from dgvm.array._engine.axes import broadcast_chunks, broadcast_region, normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.dtypes import result_type
from dgvm.array._engine.gather import take_along_maps
from dgvm.array._engine.getitem import getitem
from dgvm.array._engine.layout_ops import Concat, Copy, Reshape
from dgvm.array._engine.placement import result_like
from dgvm.array._engine.tree_op import Elementwise
from dgvm.array._engine.views import View
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.data_types import astype
from dgvm.protocol import chunk_grid

__all__ = [
    "broadcast_arrays", "broadcast_to", "concat", "concatenate", "expand_dims", "flip",
    "moveaxis", "permute_dims", "rechunk", "repeat", "reshape", "roll", "squeeze", "stack",
    "tile", "transpose", "unstack",
]


# -- axis maps: views, no copy ---------------------------------------------------------------
def _axis_view(x, src: tuple, name: str):
    # Deferred like an elementwise result: ``x + x.T`` reads x's chunks in place (those of
    # other workers as replicas, which stay valid until x is written) and copies nothing.
    return view_of(x, View.of_axes(x, src), name)


@empty_aware
def permute_dims(x, /, axes):
    """``x`` with its axes in the order ``axes``."""
    axes = normalize_axis(tuple(axes), x.ndim, sort=False)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"axes {axes} are not a permutation of the {x.ndim} axes of the array")
    return _axis_view(x, axes, "permute_dims")


@empty_aware
def transpose(x, /, axes=None):
    """NumPy's ``transpose``: reversed axes unless ``axes`` is given."""
    return permute_dims(x, tuple(reversed(range(x.ndim))) if axes is None else axes)


@empty_aware
def moveaxis(x, source, destination, /):
    src = normalize_axis(source, x.ndim, sort=False)
    dst = normalize_axis(destination, x.ndim, sort=False)
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: {len(src)} source axes but {len(dst)} destinations")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, order)


@empty_aware
def expand_dims(x, /, *, axis=0):
    """``x`` with a new axis of length 1 at ``axis``."""
    n = x.ndim + 1
    if not -n <= axis < n:
        raise IndexError(f"axis {axis} is out of range for the {n} dimensions of the result")
    axis %= n
    src = list(range(x.ndim))
    src.insert(axis, None)
    return _axis_view(x, tuple(src), "expand_dims")


@empty_aware
def squeeze(x, /, axis):
    """``x`` without the length-1 axes ``axis``."""
    axes = normalize_axis(axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of length {x.shape[a]} (shape {x.shape})")
    return _axis_view(x, tuple(a for a in range(x.ndim) if a not in axes), "squeeze")


# -- broadcasting ----------------------------------------------------------------------------
@empty_aware
def broadcast_to(x, /, shape):
    """``x`` repeated along new or length-1 axes to ``shape``: a read-only view, as NumPy's."""
    shape = tuple(int(s) for s in shape)
    if tuple(np.broadcast_shapes(x.shape, shape)) != shape:
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}")
    layout = np.broadcast_to(stand_in(x), shape)
    return derived(x, lambda s: _broadcast_copy(s, shape), readonly=True, layout=layout)


def _broadcast_copy(x, shape):
    chunks = broadcast_chunks([x], shape)
    out = result_like(x, shape, x.dtype, chunks, lambda lo: broadcast_region(x.shape, lo, lo)[0])
    blockwise.run(Elementwise(("in", 0), [x.shape], shape), out, [x], "broadcast_to")
    return out


@empty_aware(as_list=True)
def broadcast_arrays(*arrays):
    shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    return [a if a.shape == shape else broadcast_to(a, shape) for a in arrays]


# -- gathers: flip, roll, repeat, tile --------------------------------------------------------
@empty_aware
def flip(x, /, *, axis=None):
    """``x`` with the order of elements reversed along ``axis`` (None: all axes)."""
    axes = normalize_axis(axis, x.ndim)
    return getitem(x, tuple(slice(None, None, -1) if a in axes else slice(None) for a in range(x.ndim)))


@empty_aware
def roll(x, /, shift, *, axis=None):
    """``x`` with elements shifted along ``axis`` (None: the flattened array), wrapping."""
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), x.shape)
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    maps: list = [None] * x.ndim
    for s, a in zip(shifts, axes):
        a = normalize_axis(a, x.ndim)[0]
        base = np.arange(x.shape[a]) if maps[a] is None else maps[a]
        maps[a] = np.roll(base, s)
    return take_along_maps(x, maps, "roll")


def repeat_counts(repeats) -> np.ndarray:
    """``repeats`` as counts NumPy's repeat takes: the standard allows any integer dtype,
    and np.repeat casts counts to its intp only "safely" (not from uint64)."""
    reps = np.asarray(repeats.to_numpy() if isinstance(repeats, ArrayCore) else repeats)
    return reps.astype(np.int64) if reps.dtype.kind == "u" else reps


def _repeat_on_host(x, repeats, axis=None):  # NumPy's repeat, with the standard's counts
    return np.repeat(x, repeat_counts(repeats), axis=axis)


@empty_aware(host=_repeat_on_host)
def repeat(x, repeats, /, *, axis=None):
    """Each element repeated ``repeats`` times (an int, or one count per element)."""
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = normalize_axis(axis, x.ndim)[0]
    m = np.repeat(np.arange(x.shape[axis]), repeat_counts(repeats))
    maps = [m if a == axis else None for a in range(x.ndim)]
    return take_along_maps(x, maps, "repeat")


@empty_aware
def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as views (no copy)."""
    axis = normalize_axis(axis, x.ndim)[0]
    lead = (slice(None),) * axis
    return tuple(getitem(x, lead + (i,)) for i in range(x.shape[axis]))


@empty_aware
def tile(x, repetitions, /):
    """``x`` repeated ``repetitions`` times along each axis."""
    reps = (repetitions,) if isinstance(repetitions, int) else tuple(repetitions)
    if len(reps) > x.ndim:
        x = reshape(x, (1,) * (len(reps) - x.ndim) + x.shape)
    reps = (1,) * (x.ndim - len(reps)) + reps
    maps = [None if r == 1 else np.tile(np.arange(n), r) for n, r in zip(x.shape, reps)]
    return take_along_maps(x, maps, "tile")


# -- concatenation ---------------------------------------------------------------------------
@empty_aware(mixed=True)
def concat(arrays, /, *, axis=0):
    """Join arrays along an existing axis (``axis=None``: flattened)."""
    arrays = list(arrays)
    if axis is None:
        arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
    first = arrays[0]
    axis = normalize_axis(axis, first.ndim)[0]
    for a in arrays[1:]:
        if a.ndim != first.ndim or any(a.shape[d] != first.shape[d] for d in range(a.ndim) if d != axis):
            raise ValueError(f"concat along axis {axis}: shapes {[x.shape for x in arrays]} do not match")
    dtype = result_type(*arrays)
    # Arrays with no elements add nothing (zero_size): only the others are read, and the
    # result takes their chunks.
    arrays = [a for a in arrays if a.size] or arrays
    first = arrays[0]
    arrays = [a if a.dtype == dtype else astype(a, dtype) for a in arrays]
    chunks = list(first.chunks)
    chunks[axis] = tuple(itertools.chain.from_iterable(a.chunks[axis] for a in arrays))
    shape = list(first.shape)
    shape[axis] = builtins.sum(a.shape[axis] for a in arrays)
    starts = tuple(int(s) for s in np.cumsum([0] + [a.shape[axis] for a in arrays[:-1]]))
    out = result_like(first, tuple(shape), dtype, tuple(chunks))
    blockwise.run(Concat(axis, starts), out, arrays, "concat")
    return out


concatenate = concat


@empty_aware
def stack(arrays, /, *, axis=0):
    """Join arrays of one shape along a new axis."""
    arrays = list(arrays)
    n = arrays[0].ndim + 1
    if not -n <= axis < n:
        raise IndexError(f"axis {axis} is out of range for the {n} dimensions of the result")
    return concat([expand_dims(a, axis=axis % n) for a in arrays], axis=axis % n)


# -- reshape and rechunk ---------------------------------------------------------------------
@empty_aware
def reshape(x, /, shape, *, copy=None):
    """``x`` with a new shape of the same size, in C order (one -1 is inferred)."""
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"only one dimension of {shape} can be -1")
    known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or x.size % known:
            raise ValueError(f"cannot reshape an array of size {x.size} into shape {shape}")
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise ValueError(f"cannot reshape an array of size {x.size} into shape {shape}")
    if shape == x.shape:
        return astype(x, x.dtype) if copy else x
    if copy:
        return reshaped(x, shape)
    try:  # a view where NumPy's would be one (its elements in C order in the base's memory)
        layout = np.reshape(stand_in(x), shape, copy=False)
    except ValueError:
        if copy is False:
            raise ValueError(f"reshape(copy=False): this view of shape {x.shape} cannot be "
                             f"reshaped to {shape} without a copy") from None
        return reshaped(x, shape)
    return derived(x, lambda s: reshaped(s, shape), _reshape_back, layout=layout)


def _reshape_back(source, values) -> None:
    source[...] = reshaped(values, source.shape)


def reshaped(x, shape):
    """A new array of ``x``'s elements in C order, of ``shape`` (its size)."""
    if shape == x.shape:
        return astype(x, x.dtype)
    if not shape:
        chunks = ()
    else:
        # Whole trailing axes, rows cut to about the input's chunk size.
        row = int(np.prod(shape[1:], dtype=np.int64)) * x.dtype.itemsize
        target = builtins.max(int(chunk_grid.block_nbytes(x.chunks, x.dtype.itemsize).max()), row)
        per = builtins.max(1, target // builtins.max(row, 1))
        chunks = chunk_grid.normalize((per,) + tuple(shape[1:]), shape, x.dtype)
    out = result_like(x, shape, x.dtype, chunks)
    blockwise.run(Reshape(x.shape, shape), out, [x], "reshape")
    return out


def rechunk(x, /, chunks):
    """A copy of ``x`` cut into new ``chunks`` (dask's chunk specs)."""
    if x.size == 0:  # no element (zero_size): nothing to cut
        return x
    grid = chunk_grid.normalize(chunks, x.shape, x.dtype)
    out = result_like(x, x.shape, x.dtype, grid, list)
    blockwise.run(Copy(), out, [x], "rechunk")
    return out
