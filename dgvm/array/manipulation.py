"""Manipulation: transpose, reshape, broadcast, concatenate, flip, roll, repeat, tile, ...

Each is a blockwise op: an output chunk is made on its worker from the input regions it
maps to (read through the migration layer). Output chunks are placed near the input
chunk that holds their first element (``colocate=(x, picks)``), so a transpose, a slice or
a flip mostly reads local chunks.
"""

from __future__ import annotations

import builtins
import itertools
from dataclasses import dataclass

import numpy as np

from dgvm.protocol import chunk_grid
from dgvm.array._engine import blockwise, deferred
from dgvm.array.darray import DArray
from dgvm.array.reductions import normalize_axis
from dgvm.array._engine.views import View


def _empty(shape, dtype, chunks, source: DArray | None = None, first_in=None):
    """An operation's result array, whose chunk i is placed near the chunk of ``source``
    that holds the input element ``first_in(lo_i)`` maps to. Not zero-filled: the
    operation's task writes every element (``blockwise.run`` stores whole blocks), so a
    pass of memory writes is saved, and a placed result may take over a released one's
    allocation (``dgvm.array._engine.recycle``). An operation that fails part way leaves old
    values in the chunks it did not reach; its result is never returned."""
    from dgvm.array.creation import new_array

    colocate = None
    if source is not None and first_in is not None:
        colocate = (source, picks_near(source, chunks, first_in))
    return new_array(shape, dtype, chunks, colocate=colocate, zero=False)


def picks_near(source: DArray, chunks, first_in) -> list[int]:
    """Per chunk of a result cut into ``chunks``: the chunk of ``source`` holding the
    input element ``first_in(lo)`` that the result chunk's first element ``lo`` maps to."""
    starts = [np.cumsum((0,) + c) for c in source.chunks]
    return [_chunk_at(source.numblocks, starts, first_in([s.start for s in sl]))
            for sl in chunk_grid.block_slices(chunks)]


def _chunk_at(grid, starts, coords) -> int:
    """Chunk index that holds the element at global ``coords`` (-1: outside the array)."""
    block = []
    for st, c in zip(starts, coords):
        if not 0 <= c < st[-1]:
            return -1
        block.append(int(np.searchsorted(st, c, side="right")) - 1)
    return chunk_grid.flat_index(block, grid)


# -- axis maps: permute_dims, expand_dims, squeeze, moveaxis (views: no copy) -------------
def _axis_view(x: DArray, src: tuple, name: str) -> DArray:
    # Deferred like an elementwise result: ``x + x.T`` reads x's chunks in place (those of
    # other workers as replicas, which stay valid until x is written) and copies nothing.
    return deferred.view(x, View.of_axes(x, src), name)


def permute_dims(x, /, axes) -> DArray:
    """``x`` with its axes in the order ``axes``."""
    axes = normalize_axis(tuple(axes), x.ndim, sort=False)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"axes {axes} are not a permutation of the {x.ndim} axes of the array")
    return _axis_view(x, axes, "permute_dims")


def matrix_transpose(x, /) -> DArray:
    """Transpose of the last two axes."""
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose needs at least 2 dimensions, got {x.ndim}")
    axes = list(range(x.ndim))
    axes[-2], axes[-1] = axes[-1], axes[-2]
    return permute_dims(x, axes)


def transpose(x, /, axes=None) -> DArray:
    """NumPy's ``transpose``: reversed axes unless ``axes`` is given."""
    return permute_dims(x, tuple(reversed(range(x.ndim))) if axes is None else axes)


def moveaxis(x, source, destination, /) -> DArray:
    src = normalize_axis(source, x.ndim, sort=False)
    dst = normalize_axis(destination, x.ndim, sort=False)
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: {len(src)} source axes but {len(dst)} destinations")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, order)


def expand_dims(x, /, *, axis=0) -> DArray:
    """``x`` with a new axis of length 1 at ``axis``."""
    n = x.ndim + 1
    if not -n <= axis < n:
        raise IndexError(f"axis {axis} is out of range for the {n} dimensions of the result")
    axis %= n
    src = list(range(x.ndim))
    src.insert(axis, None)
    return _axis_view(x, tuple(src), "expand_dims")


def squeeze(x, /, axis) -> DArray:
    """``x`` without the length-1 axes ``axis``."""
    axes = normalize_axis(axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of length {x.shape[a]} (shape {x.shape})")
    return _axis_view(x, tuple(a for a in range(x.ndim) if a not in axes), "squeeze")


# -- broadcasting ------------------------------------------------------------------------
def broadcast_to(x, /, shape) -> DArray:
    """``x`` repeated along new or length-1 axes to ``shape``."""
    from dgvm.array.elementwise import Elementwise, broadcast_region, out_chunks

    shape = tuple(int(s) for s in shape)
    if tuple(np.broadcast_shapes(x.shape, shape)) != shape:
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}")
    chunks = out_chunks([x], shape, x.dtype)
    out = _empty(shape, x.dtype, chunks, x, lambda lo: broadcast_region(x.shape, lo, lo)[0])
    blockwise.run(Elementwise(("in", 0), [x.shape], shape), out, [x], "broadcast_to")
    return out


def broadcast_arrays(*arrays) -> list[DArray]:
    shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    return [a if a.shape == shape else broadcast_to(a, shape) for a in arrays]


# -- gathers: flip, roll, repeat, tile, slicing, take -------------------------------------
@dataclass
class Take:
    """Output coordinate j on axis a is input coordinate ``maps[a][j]`` (None: j itself).
    The block reads the bounding region of the coordinates it needs, then picks them."""

    maps: tuple

    def block(self, read, lo, hi, xp):
        rlo, rhi, picks = [], [], []
        for a, m in enumerate(self.maps):
            idx = np.arange(lo[a], hi[a]) if m is None else m[lo[a]:hi[a]]
            i0, i1 = int(idx.min()), int(idx.max()) + 1
            rlo.append(i0)
            rhi.append(i1)
            picks.append(_pick(idx, i0, i1, xp))
        region = read(0, rlo, rhi)
        for a, p in enumerate(picks):
            if isinstance(p, slice):
                region = region[(slice(None),) * a + (p,)]
            elif p is not None:
                region = xp.take(region, p, axis=a)
        return region


def _pick(idx: np.ndarray, i0: int, i1: int, xp):
    """How to pick coordinates ``idx`` from a region starting at ``i0``: None (all of it),
    a slice (evenly spaced: a view), or an index array."""
    n = len(idx)
    step = int(idx[1] - idx[0]) if n > 1 else 1
    if step != 0 and (n == 1 or (np.diff(idx) == step).all()):
        if step == 1 and n == i1 - i0:
            return None
        start = int(idx[0]) - i0
        stop = start + step * n
        return slice(start, stop if stop >= 0 else None, step)
    return xp.asarray(idx - i0)


def _map_chunks(x: DArray, a: int, m: np.ndarray) -> tuple:
    """Chunks along an axis gathered by ``m``: cut where the source block changes, so that
    most output chunks read one input chunk; never larger than the input's largest."""
    st = np.cumsum((0,) + x.chunks[a])
    src_block = np.searchsorted(st, m, side="right") - 1
    cuts = np.flatnonzero(np.diff(src_block)) + 1
    edges = [0, *cuts.tolist(), len(m)]
    limit = builtins.max(x.chunks[a])
    out = []
    for s, e in zip(edges[:-1], edges[1:]):
        while e - s > limit:
            out.append(limit)
            s += limit
        out.append(e - s)
    return tuple(out)


def take_along_maps(x: DArray, maps: list, name: str) -> DArray:
    """``x`` gathered by per-axis coordinate maps (None: the axis as it is)."""
    maps = [None if m is None else np.asarray(m, dtype=np.int64) for m in maps]
    for a, m in enumerate(maps):
        if m is not None and len(m) and (m.min() < 0 or m.max() >= x.shape[a]):
            raise IndexError(f"index out of bounds for axis {a} of length {x.shape[a]}")
    shape = tuple(x.shape[a] if m is None else len(m) for a, m in enumerate(maps))
    if 0 in shape:  # nothing to gather: held on the caller (dgvm.array._engine.zero_size)
        from dgvm.array._engine import zero_size

        return zero_size.array(shape, x.dtype, x.client)
    chunks = tuple(x.chunks[a] if m is None else _map_chunks(x, a, m) for a, m in enumerate(maps))

    def first_in(lo):
        return [l if m is None else int(m[l]) for l, m in zip(lo, maps)]

    out = _empty(shape, x.dtype, chunks, x, first_in)
    blockwise.run(Take(tuple(maps)), out, [x], name)
    return out


def flip(x, /, *, axis=None) -> DArray:
    """``x`` with the order of elements reversed along ``axis`` (None: all axes)."""
    axes = normalize_axis(axis, x.ndim)
    maps = [np.arange(x.shape[a] - 1, -1, -1) if a in axes else None for a in range(x.ndim)]
    return take_along_maps(x, maps, "flip")


def roll(x, /, shift, *, axis=None) -> DArray:
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
    reps = np.asarray(repeats.to_numpy() if isinstance(repeats, DArray) else repeats)
    return reps.astype(np.int64) if reps.dtype.kind == "u" else reps


def repeat(x, repeats, /, *, axis=None) -> DArray:
    """Each element repeated ``repeats`` times (an int, or one count per element)."""
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = normalize_axis(axis, x.ndim)[0]
    m = np.repeat(np.arange(x.shape[axis]), repeat_counts(repeats))
    maps = [m if a == axis else None for a in range(x.ndim)]
    return take_along_maps(x, maps, "repeat")


def unstack(x, /, *, axis=0) -> tuple[DArray, ...]:
    """The slices of ``x`` along ``axis``, as views (no copy)."""
    axis = normalize_axis(axis, x.ndim)[0]
    lead = (slice(None),) * axis
    return tuple(x[lead + (i,)] for i in range(x.shape[axis]))


def tile(x, repetitions, /) -> DArray:
    """``x`` repeated ``repetitions`` times along each axis."""
    reps = (repetitions,) if isinstance(repetitions, int) else tuple(repetitions)
    if len(reps) > x.ndim:
        x = reshape(x, (1,) * (len(reps) - x.ndim) + x.shape)
    reps = (1,) * (x.ndim - len(reps)) + reps
    maps = [None if r == 1 else np.tile(np.arange(n), r) for n, r in zip(x.shape, reps)]
    return take_along_maps(x, maps, "tile")


def take(x, indices, /, *, axis=None) -> DArray:
    """Elements of ``x`` at integer ``indices`` along ``axis`` (negative ones count from
    the end)."""
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"take on a {x.ndim}-d array needs axis=")
        axis = 0
    axis = normalize_axis(axis, x.ndim)[0]
    idx = np.asarray(indices.to_numpy() if isinstance(indices, DArray) else indices)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise IndexError(f"take needs a 1-d integer index array, got {idx.dtype} of shape {idx.shape}")
    n = x.shape[axis]
    if ((idx < -n) | (idx >= n)).any():
        raise IndexError(f"index out of bounds for axis {axis} of length {n}")
    idx = np.where(idx < 0, idx + n, idx)
    return take_along_maps(x, [idx if a == axis else None for a in range(x.ndim)], "take")


# -- concatenation -------------------------------------------------------------------------
@dataclass
class _Concat:
    """Output chunks along ``axis`` never straddle two inputs: each reads one of them."""

    axis: int
    starts: tuple  # start of each input along axis

    def block(self, read, lo, hi, xp):
        i = int(np.searchsorted(self.starts, lo[self.axis], side="right")) - 1
        ilo, ihi = list(lo), list(hi)
        ilo[self.axis] -= self.starts[i]
        ihi[self.axis] -= self.starts[i]
        return read(i, ilo, ihi)


def concat(arrays, /, *, axis=0) -> DArray:
    """Join arrays along an existing axis (``axis=None``: flattened)."""
    from dgvm.array.dtypes import result_type

    arrays = list(arrays)
    if axis is None:
        arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
    first = arrays[0]
    axis = normalize_axis(axis, first.ndim)[0]
    for a in arrays[1:]:
        if a.ndim != first.ndim or any(a.shape[d] != first.shape[d] for d in range(a.ndim) if d != axis):
            raise ValueError(f"concat along axis {axis}: shapes {[x.shape for x in arrays]} do not match")
    dtype = result_type(*arrays)
    # Arrays with no elements add nothing (dgvm.array._engine.zero_size): only the others are read,
    # and the result takes their chunks.
    arrays = [a for a in arrays if a.size] or arrays
    first = arrays[0]
    arrays = [a if a.dtype == dtype else a.astype(dtype) for a in arrays]
    chunks = list(first.chunks)
    chunks[axis] = tuple(itertools.chain.from_iterable(a.chunks[axis] for a in arrays))
    shape = list(first.shape)
    shape[axis] = builtins.sum(a.shape[axis] for a in arrays)
    starts = tuple(int(s) for s in np.cumsum([0] + [a.shape[axis] for a in arrays[:-1]]))
    out = _empty(tuple(shape), dtype, tuple(chunks))
    blockwise.run(_Concat(axis, starts), out, arrays, "concat")
    return out


concatenate = concat


def stack(arrays, /, *, axis=0) -> DArray:
    """Join arrays of one shape along a new axis."""
    arrays = list(arrays)
    n = arrays[0].ndim + 1
    if not -n <= axis < n:
        raise IndexError(f"axis {axis} is out of range for the {n} dimensions of the result")
    return concat([expand_dims(a, axis=axis % n) for a in arrays], axis=axis % n)


# -- reshape ---------------------------------------------------------------------------------
@dataclass
class _Reshape:
    """C-order reshape: an output chunk's rows (full trailing axes) are a contiguous run of
    the flat array; read the input rows that cover that run, cut it, then the chunk."""

    in_shape: tuple
    out_shape: tuple

    def block(self, read, lo, hi, xp):
        if not self.out_shape:  # one element
            return read(0, [0] * len(self.in_shape), list(self.in_shape)).reshape(())
        out_row = int(np.prod(self.out_shape[1:], dtype=np.int64))
        in_row = int(np.prod(self.in_shape[1:], dtype=np.int64)) if self.in_shape else 1
        f0, f1 = lo[0] * out_row, hi[0] * out_row
        r0, r1 = f0 // in_row, -(-f1 // in_row)
        if self.in_shape:
            slab = read(0, [r0] + [0] * (len(self.in_shape) - 1), [r1, *self.in_shape[1:]])
        else:
            slab = read(0, [], [])
        flat = slab.reshape(-1)[f0 - r0 * in_row:f1 - r0 * in_row]
        rows = flat.reshape((hi[0] - lo[0],) + tuple(self.out_shape[1:]))
        return rows[(slice(None),) + tuple(slice(l, h) for l, h in zip(lo[1:], hi[1:]))]


def reshape(x, /, shape, *, copy=None) -> DArray:
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
    if copy is False:
        raise ValueError("reshape(copy=False): a DArray's reshape always makes a new array")
    if shape == x.shape:
        return x.astype(x.dtype) if copy else x
    if not shape:
        chunks = ()
    else:
        # Whole trailing axes, rows cut to about the input's chunk size.
        row = int(np.prod(shape[1:], dtype=np.int64)) * x.dtype.itemsize
        target = builtins.max(int(chunk_grid.block_nbytes(x.chunks, x.dtype.itemsize).max()), row)
        per = builtins.max(1, target // builtins.max(row, 1))
        chunks = chunk_grid.normalize((per,) + tuple(shape[1:]), shape, x.dtype)
    out = _empty(shape, x.dtype, chunks)
    blockwise.run(_Reshape(x.shape, shape), out, [x], "reshape")
    return out


# -- rechunk ---------------------------------------------------------------------------------
@dataclass
class _Copy:
    def block(self, read, lo, hi, xp):
        return read(0, lo, hi)


def rechunk(x, /, chunks) -> DArray:
    """A copy of ``x`` cut into new ``chunks`` (dask's chunk specs)."""
    if x.size == 0:  # no element (dgvm.array._engine.zero_size): nothing to cut
        return x
    grid = chunk_grid.normalize(chunks, x.shape, x.dtype)
    out = _empty(x.shape, x.dtype, grid, x, list)
    blockwise.run(_Copy(), out, [x], "rechunk")
    return out
