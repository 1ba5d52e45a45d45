"""Manipulation functions: transpose, reshape, broadcast, concatenate, flip, roll, repeat, ...

Axis permutations, ``expand_dims``, ``squeeze`` and ``flip`` are views of their input's
memory, as in NumPy (``_engine.aliases``). The others are blockwise
ops: an output chunk is made on its worker from the input regions it maps to (read
through the migration layer), and placed near the input chunk that holds its first
element, so a flip, a roll or a broadcast mostly reads local chunks
(``_engine.gather``, ``_engine.layout_ops``).

NumPy's own names compose these: ``swapaxes`` and ``atleast_*d`` are views,
``hstack``/``vstack``/``column_stack``/``dstack`` concatenations, ``split`` and
``array_split`` basic slices (views), ``ravel`` a reshape, and ``pad`` a gather of the
array's own elements (``edge``, ``reflect``, ``symmetric``, ``wrap``: ``_engine.padding``)
or a concatenation with filled blocks (``constant``).
"""

from __future__ import annotations

import builtins
import itertools
import operator

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.aliases import derived, stand_in, view_of
from dgvm.array._engine.axes import broadcast_chunks, broadcast_region, normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine import padding
from dgvm.array._engine.dtypes import check, result_type
from dgvm.array._engine.fill_ops import Fill
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
    "array_split", "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_arrays", "broadcast_to",
    "column_stack", "concat", "concatenate", "dstack", "expand_dims", "flip", "hstack", "moveaxis",
    "pad", "permute_dims", "ravel", "rechunk", "repeat", "reshape", "roll", "split", "squeeze",
    "stack", "swapaxes", "tile", "transpose", "unstack", "vstack",
]


def _darray(x, name: str, arg: str = "a"):
    if not isinstance(x, ArrayCore):
        raise TypeError(f"dgvm.array.{name}: {arg} must be a DArray, not {type(x).__name__}")
    return x


def _one_axis(axis, ndim: int, name: str, arg: str = "axis") -> int:
    if isinstance(axis, builtins.bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"dgvm.array.{name}: {arg} must be an int, not {axis!r}")
    return normalize_axis(axis, ndim)[0]


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
def expand_dims(x, /, axis=0):
    """``x`` with a new axis of length 1 at ``axis``, a position in the result; a tuple of
    positions inserts several, as NumPy's. ``axis`` may be passed by position
    (``expand_dims(x, 0)``), as NumPy's and the standard's signatures allow."""
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    # AxisError (an IndexError, as the standard asks) out of range; ValueError if repeated.
    new = normalize_axis(axes, x.ndim + len(axes))
    src = list(range(x.ndim))
    for a in new:  # ascending, so each position is final once inserted
        src.insert(a, None)
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
    if x.ndim == 0 and axis is not None:  # (reductions take axis 0 of a 0-d array; flip does not)
        raise np.exceptions.AxisError(f"flip: axis {axis} is out of bounds for an array of 0 dimensions")
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


def repeat(x, repeats, /, *, axis=None):
    """Each element repeated ``repeats`` times (an int, or one count per element)."""
    # The counts are read before an array with no elements is computed on the caller:
    # there the result's length along ``axis`` is still their sum (``repeat(zeros((2, 0)),
    # [2], axis=0)`` has 4 rows), and stand-ins for them would count nothing.
    return _repeat(x, repeat_counts(repeats), axis=axis)


def _repeat_on_host(x, counts, axis=None):  # NumPy's repeat
    return np.repeat(x, counts, axis=axis)


@empty_aware(host=_repeat_on_host)
def _repeat(x, counts, /, *, axis=None):
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = normalize_axis(axis, x.ndim)[0]
    m = np.repeat(np.arange(x.shape[axis]), counts)
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


def _sequence(arrays, name: str) -> list:
    """NumPy's joins take a list or tuple of arrays (not a generator, not one array)."""
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"dgvm.array.{name}: arrays to join must be passed as a list or tuple, "
                        f"not {type(arrays).__name__}")
    if not arrays:
        raise ValueError(f"dgvm.array.{name}: need at least one array to concatenate")
    for i, a in enumerate(arrays):
        _darray(a, name, f"array {i}")
    return list(arrays)


def _cast_all(arrays: list, dtype, casting: str, name: str) -> list:
    """The arrays in ``dtype`` (None: as they are), each cast allowed by ``casting``."""
    if dtype is None:
        return arrays
    target = check(dtype)
    for a in arrays:
        if not np.can_cast(a.dtype, target, casting=casting):
            raise TypeError(f"dgvm.array.{name}: cannot cast array data from {a.dtype} to "
                            f"{target} according to the rule {casting!r}")
    return [a if a.dtype == target else astype(a, target) for a in arrays]


@empty_aware(mixed=True)
def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """NumPy's ``concatenate``: ``concat`` with ``axis`` positional too and NumPy's
    ``dtype``/``casting`` (``out=`` is refused: assign the result instead)."""
    if out is not None:
        raise TypeError("dgvm.array.concatenate: out= is not supported for DArrays; assign the result instead")
    arrays = _sequence(arrays, "concatenate")
    return concat(_cast_all(arrays, dtype, casting, "concatenate"), axis=axis)


@empty_aware(mixed=True)
def hstack(tup, *, dtype=None, casting="same_kind"):
    """NumPy's ``hstack``: join along the second axis (the first for 1-d arrays)."""
    arrays = [atleast_1d(a) for a in _sequence(tup, "hstack")]
    return concatenate(arrays, 0 if arrays[0].ndim == 1 else 1, dtype=dtype, casting=casting)


@empty_aware(mixed=True)
def vstack(tup, *, dtype=None, casting="same_kind"):
    """NumPy's ``vstack``: join along the first axis, 1-d arrays as rows."""
    arrays = [atleast_2d(a) for a in _sequence(tup, "vstack")]
    return concatenate(arrays, 0, dtype=dtype, casting=casting)


@empty_aware(mixed=True)
def dstack(tup):
    """NumPy's ``dstack``: join along the third axis (``atleast_3d`` first)."""
    return concatenate([atleast_3d(a) for a in _sequence(tup, "dstack")], 2)


@empty_aware(mixed=True)
def column_stack(tup):
    """NumPy's ``column_stack``: 1-d arrays as columns, joined along the second axis."""
    cols = []
    for a in _sequence(tup, "column_stack"):
        if a.ndim == 0:
            a = reshape(a, (1, 1))
        elif a.ndim == 1:
            a = expand_dims(a, axis=1)
        cols.append(a)
    return concatenate(cols, 1)


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


# -- NumPy's views and reshapes: swapaxes, atleast_*d, ravel, split ------------------------
@empty_aware
def swapaxes(a, axis1, axis2):
    """NumPy's ``swapaxes``: ``a`` with two axes interchanged (a view)."""
    _darray(a, "swapaxes")
    i, j = _one_axis(axis1, a.ndim, "swapaxes", "axis1"), _one_axis(axis2, a.ndim, "swapaxes", "axis2")
    order = list(range(a.ndim))
    order[i], order[j] = order[j], order[i]
    return permute_dims(a, order)


def _atleast(arrays, n: int, name: str, grow):
    out = []
    for i, a in enumerate(arrays):
        a = _darray(a, name, f"array {i}")
        while a.ndim < n:
            a = grow(a)
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


@empty_aware
def atleast_1d(*arys):
    """NumPy's ``atleast_1d``: 0-d arrays as 1-d (views); several arrays give a tuple."""
    return _atleast(arys, 1, "atleast_1d", lambda a: expand_dims(a, axis=0))


@empty_aware
def atleast_2d(*arys):
    """NumPy's ``atleast_2d``: 0-d as (1, 1), 1-d (N,) as (1, N) (views)."""
    return _atleast(arys, 2, "atleast_2d", lambda a: expand_dims(a, axis=0))


@empty_aware
def atleast_3d(*arys):
    """NumPy's ``atleast_3d``: 0-d as (1, 1, 1), 1-d (N,) as (1, N, 1), 2-d (M, N) as
    (M, N, 1) (views)."""
    def grow(a):
        if a.ndim == 0:
            return reshape(a, (1, 1, 1))
        return expand_dims(expand_dims(a, axis=0), axis=2) if a.ndim == 1 else expand_dims(a, axis=2)

    return _atleast(arys, 3, "atleast_3d", grow)


@empty_aware
def ravel(a, order="C"):
    """NumPy's ``ravel``: the elements of ``a`` as a 1-d array, in C order (``order="F"``:
    Fortran order; "A" and "K" are C order for a DArray, which is C-ordered)."""
    _darray(a, "ravel")
    if order not in ("C", "F", "A", "K"):
        raise ValueError(f"dgvm.array.ravel: order must be one of 'C', 'F', 'A', 'K', not {order!r}")
    if order == "F" and a.ndim > 1:
        a = permute_dims(a, tuple(reversed(range(a.ndim))))
    return reshape(a, (-1,))


def _split_bounds(n: int, indices_or_sections, equal: bool, name: str) -> list[tuple]:
    """(start, stop) of each piece along an axis of ``n`` elements, as NumPy's split."""
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(indices_or_sections, builtins.bool):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError(f"dgvm.array.{name}: number sections must be larger than 0, got {sections}")
        if equal and n % sections:
            raise ValueError(f"dgvm.array.{name}: array split does not result in an equal division "
                             f"({n} elements in {sections} sections)")
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        stops = np.cumsum(sizes).tolist()
        return list(zip([0] + stops[:-1], stops))
    try:
        points = [operator.index(i) for i in indices_or_sections]
    except TypeError:
        raise TypeError(f"dgvm.array.{name}: indices_or_sections must be an int or a sequence of ints, "
                        f"not {indices_or_sections!r}") from None
    return list(zip([0] + points, points + [n]))


def _pieces(ary, indices_or_sections, axis, equal: bool, name: str) -> list:
    _darray(ary, name, "ary")
    if ary.ndim == 0:
        raise ValueError(f"dgvm.array.{name}: a 0-d array cannot be split")
    axis = _one_axis(axis, ary.ndim, name)
    lead = (slice(None),) * axis
    return [getitem(ary, lead + (slice(b, e),))
            for b, e in _split_bounds(ary.shape[axis], indices_or_sections, equal, name)]


@empty_aware
def split(ary, indices_or_sections, axis=0):
    """NumPy's ``split``: a list of views of ``ary`` along ``axis``, in ``N`` equal pieces
    (an int, which must divide the axis) or cut before each of a list of indices."""
    return _pieces(ary, indices_or_sections, axis, True, "split")


@empty_aware
def array_split(ary, indices_or_sections, axis=0):
    """NumPy's ``array_split``: as ``split``, but ``N`` pieces need not be equal (the
    first ``len % N`` have one element more)."""
    return _pieces(ary, indices_or_sections, axis, False, "array_split")


# -- pad ------------------------------------------------------------------------------------
def _filled(like, shape: tuple, chunks: tuple, value):
    """A new array of ``shape`` filled with ``value``, made where it is placed."""
    out = type(like).allocated(shape, like.dtype, chunks, client=like.client)
    if value != 0:
        blockwise.run(Fill(value, like.dtype), out, [], "pad")
    return out


def _runs(total: int, step: int) -> tuple:
    """``total`` cut into pieces of ``step`` (the last shorter)."""
    step = builtins.max(1, step)
    return tuple([step] * (total // step) + ([total % step] if total % step else []))


@empty_aware
def pad(array, pad_width, mode="constant", **kwargs):
    """NumPy's ``pad``, modes ``constant`` (``constant_values``), ``edge``, ``reflect``,
    ``symmetric``, ``wrap`` (and ``empty``, whose undefined values are zeros here);
    ``pad_width`` and ``constant_values`` in NumPy's forms (a number, ``(before, after)``
    or one pair per axis). The modes that repeat the array's elements are one gather of
    them where they live; ``constant`` joins filled blocks, axis after axis as NumPy
    pads (so a corner takes the later axis's value). Other modes raise ``NotSupported``."""
    x = _darray(array, "pad", "array")
    padding.check_mode(mode, kwargs)
    pairs = padding.widths(pad_width, x.ndim)
    if not builtins.any(b or a for b, a in pairs):
        return astype(x, x.dtype)  # a copy, as NumPy's
    if mode in padding.GATHERED:
        return take_along_maps(x, padding.maps(x.shape, pairs, mode), "pad")
    values = padding.constants(kwargs.get("constant_values", 0) if mode == "constant" else 0, x.ndim, x.dtype)
    y = x
    for axis, ((b, e), (vb, ve)) in enumerate(zip(pairs, values)):
        if not (b or e):
            continue
        step = builtins.max(y.chunks[axis])
        parts = []
        for width, value in ((b, vb), (e, ve)):
            if width:
                shape = y.shape[:axis] + (width,) + y.shape[axis + 1:]
                chunks = y.chunks[:axis] + (_runs(width, step),) + y.chunks[axis + 1:]
                parts.append(_filled(y, shape, chunks, value))
        y = concat(parts[:1] + [y] + parts[1:] if b else [y] + parts, axis=axis)
    return y
