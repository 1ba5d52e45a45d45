"""Creation functions: new arrays made where they live.

Every array is made on the workers that hold its chunks: a fill, a range or an identity
matrix is computed there (one task per worker, ``_engine.fill_ops``), never sent from
the caller. The first array made with no cluster connected starts a local one
(``_engine.clients``), so ``import dgvm.array as np`` is all a NumPy program needs.
"""

from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.dtypes import check
from dgvm.array._engine.fill_ops import Eye, Fill, Grid, Range, Triangle
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.array_object import DArray
from dgvm.array.conversion import from_dask, from_numpy
from dgvm.array.data_types import astype
from dgvm.array.manipulation import expand_dims, stack
from dgvm.protocol.arguments import shown

__all__ = [
    "arange", "array", "asarray", "copy", "empty", "empty_like", "eye", "from_dlpack", "full",
    "full_like", "linspace", "meshgrid", "ones", "ones_like", "tril", "triu", "zeros",
    "zeros_like",
]


@empty_aware
def empty(shape, dtype=None, *, device=None, chunks="auto", placement=None, colocate=None,
          client=None, replicas=None) -> DArray:
    """A new array in global device memory (its memory is zero-filled on allocation);
    ``replicas=k`` keeps each chunk on k workers (``dgvm.malloc``'s)."""
    return DArray.allocated(shape, dtype, chunks, placement, colocate, client, replicas=replicas)


@empty_aware
def zeros(shape, dtype=None, *, device=None, chunks="auto", placement=None, colocate=None,
          client=None, replicas=None) -> DArray:
    """An array of zeros in global device memory."""
    return empty(shape, dtype, chunks=chunks, placement=placement, colocate=colocate, client=client,
                 replicas=replicas)


@empty_aware
def full(shape, fill_value, dtype=None, *, device=None, chunks="auto", placement=None,
         colocate=None, client=None, replicas=None) -> DArray:
    """An array of ``fill_value`` (dtype from the value when not given)."""
    if isinstance(fill_value, DArray):
        if fill_value.ndim:  # an array fill: broadcast over the shape, as NumPy's
            x = empty(shape, dtype or fill_value.dtype, chunks=chunks, placement=placement,
                      colocate=colocate, client=client, replicas=replicas)
            x[...] = fill_value
            return x
        dtype = dtype or fill_value.dtype
        fill_value = fill_value.item()
    if np.ndim(fill_value):  # a host array fill, broadcast over the shape as NumPy's
        value = np.asarray(fill_value)
        x = empty(shape, dtype or value.dtype, chunks=chunks, placement=placement, colocate=colocate, client=client,
                  replicas=replicas)
        try:
            fits = np.broadcast_shapes(value.shape, x.shape) == x.shape
        except ValueError:
            fits = False
        if not fits:
            x.free()
            raise ValueError(f"full: fill_value of shape {value.shape} does not broadcast to shape {x.shape}")
        x[...] = value
        return x
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
        if dtype.kind == "i":
            dtype = np.dtype(np.int64)
    x = empty(shape, dtype, chunks=chunks, placement=placement, colocate=colocate, client=client,
              replicas=replicas)
    if _needs_fill(fill_value, x.dtype):
        blockwise.run(Fill(fill_value, x.dtype), x, [], "full")
    return x


def _needs_fill(fill_value, dtype) -> bool:
    """Whether ``fill_value`` differs from the zero bytes a new allocation holds: ``-0.0``
    compares equal to 0 but carries a sign bit, which a skipped fill would lose."""
    return np.asarray(fill_value, dtype=dtype).tobytes().strip(b"\0") != b""


@empty_aware
def ones(shape, dtype=None, *, device=None, chunks="auto", placement=None, colocate=None,
         client=None, replicas=None) -> DArray:
    """An array of ones."""
    return full(shape, 1, check(np.float64 if dtype is None else dtype), chunks=chunks,
                placement=placement, colocate=colocate, client=client, replicas=replicas)


@empty_aware
def empty_like(x, /, *, dtype=None, device=None, chunks=None) -> DArray:
    return empty(x.shape, dtype or x.dtype, chunks=chunks or x.chunks,
                 colocate=x if chunks is None else None)


@empty_aware
def zeros_like(x, /, *, dtype=None, device=None, chunks=None) -> DArray:
    return empty_like(x, dtype=dtype, chunks=chunks)


@empty_aware
def ones_like(x, /, *, dtype=None, device=None, chunks=None) -> DArray:
    return full_like(x, 1, dtype=dtype, chunks=chunks)


@empty_aware
def full_like(x, /, fill_value, *, dtype=None, device=None, chunks=None) -> DArray:
    return full(x.shape, fill_value, dtype or x.dtype, chunks=chunks or x.chunks,
                colocate=x if chunks is None else None)


@empty_aware
def arange(start, /, stop=None, step=1, *, dtype=None, device=None, chunks="auto") -> DArray:
    """Evenly spaced values in ``[start, stop)``."""
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        _finite_real("arange", name, v)
    if step == 0:
        raise ValueError("arange: step must not be zero")
    n = max(0, math.ceil((stop - start) / step))
    if dtype is None:
        # NumPy's dtype for these three values (a float stop makes floats), from a range
        # of two elements: ``stop - stop`` carries stop's type.
        dtype = np.arange(start, start + 2 * step + (stop - stop), step).dtype
    x = empty((n,), dtype, chunks=chunks)
    blockwise.run(Range(start, step, x.dtype), x, [], "arange")
    return x


@empty_aware
def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True, chunks="auto") -> DArray:
    """``num`` evenly spaced values from ``start`` to ``stop``."""
    num = _count("linspace", "num", num)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    if dtype is None:
        dtype = np.result_type(np.float64, np.asarray(start), np.asarray(stop))
    x = empty((num,), dtype, chunks=chunks)
    last = stop if endpoint and num > 1 else None
    blockwise.run(Range(start, step, x.dtype, last, num), x, [], "linspace")
    return x


@empty_aware
def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None, chunks="auto") -> DArray:
    """A 2-d array with ones on diagonal ``k``."""
    n_rows = _count("eye", "n_rows", n_rows)
    n_cols = None if n_cols is None else _count("eye", "n_cols", n_cols)
    k = _count("eye", "k", k, low=None)
    x = empty((n_rows, n_rows if n_cols is None else n_cols), dtype, chunks=chunks)
    blockwise.run(Eye(k, x.dtype), x, [], "eye")
    return x


def _count(fn: str, name: str, value, low: int | None = 0) -> int:
    """An integer argument as NumPy takes it (anything with ``__index__``)."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an integer, got {shown(value)}") from None
    if low is not None and n < low:
        raise ValueError(f"{fn}: {name} must be >= {low}, got {n}")
    return n


def _finite_real(fn: str, name: str, value) -> None:
    """A real, finite number (or a 0-d array of one)."""
    try:
        a = np.asarray(value)
    except Exception:  # noqa: BLE001  (whatever NumPy cannot read is no number)
        a = None
    if a is None or a.ndim != 0 or a.dtype.kind not in "biuf":
        raise TypeError(f"{fn}: {name} must be a real number, got {shown(value)}")
    if not np.isfinite(a):
        raise ValueError(f"{fn}: {name} must be finite, got {value}")


def _triangle(x, k, upper, name):
    if x.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions, got {x.ndim}")
    out = empty_like(x)
    blockwise.run(Triangle(k, upper), out, [x], name)
    return out


@empty_aware
def tril(x, /, *, k=0) -> DArray:
    """``x`` with the elements above diagonal ``k`` zeroed."""
    return _triangle(x, k, False, "tril")


@empty_aware
def triu(x, /, *, k=0) -> DArray:
    """``x`` with the elements below diagonal ``k`` zeroed."""
    return _triangle(x, k, True, "triu")


@empty_aware(as_list=True)
def meshgrid(*arrays, indexing="xy") -> list[DArray]:
    """Coordinate arrays from 1-d arrays (``indexing`` "xy" or "ij", as NumPy)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"indexing must be 'xy' or 'ij', got {indexing!r}")
    shape = [a.shape[0] for a in arrays]
    axes = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    chunks = [None] * len(arrays)
    for a, ax in zip(arrays, axes):
        chunks[ax] = a.chunks[0]
    dtype = np.result_type(*(a.dtype for a in arrays))
    out = []
    for a, ax in zip(arrays, axes):
        g = empty(tuple(shape), dtype, chunks=tuple(chunks))
        blockwise.run(Grid(ax), g, [apply("astype", a, dtype=dtype) if a.dtype != dtype else a], "meshgrid")
        out.append(g)
    return out


@empty_aware
def from_dlpack(x, /, *, device=None, copy=None) -> DArray:
    """A DArray of the values of ``x``, any object that exports DLPack (a NumPy or CuPy
    array, a tensor), copied into global device memory; a DArray as ``asarray``."""
    if isinstance(x, DArray):
        return asarray(x, copy=copy)
    if copy is False:
        raise ValueError("dgvm.array.from_dlpack: copy=False, but the values must be copied "
                         "into global device memory")
    if hasattr(x, "get") and hasattr(x, "__cuda_array_interface__"):
        host = x.get()  # a CuPy array: its own copy to the host
    else:
        try:
            host = np.from_dlpack(x)
        except (TypeError, BufferError, RuntimeError) as e:
            raise TypeError(f"dgvm.array.from_dlpack: {type(x).__name__} gives no host "
                            f"memory through DLPack ({e})") from None
    return from_numpy(host)


@empty_aware
def asarray(obj, /, *, dtype=None, device=None, copy=None, chunks="auto") -> DArray:
    """A DArray from a DArray (no copy unless asked or the dtype changes), a NumPy array,
    a dask array, a nested sequence or a scalar."""
    if isinstance(obj, DArray):
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            if copy is False:
                raise ValueError(f"asarray(copy=False) cannot change dtype {obj.dtype} to {dtype}")
            return obj.astype(dtype)
        return obj.astype(obj.dtype) if copy else obj
    if copy is False:
        raise ValueError("asarray(copy=False): host data always moves to device memory")
    if type(obj).__module__.startswith("dask.array"):
        x = from_dask(obj, chunks=None if chunks == "auto" else chunks)
        return x if dtype is None else x.astype(dtype)
    if _holds_darrays(obj):
        if any(a.size > _HOST_LEAF_LIMIT for a in _darray_leaves(obj)):
            return array(obj, dtype=dtype, copy=None, chunks=chunks)  # stacked where they live
        # Small arrays among host values (``[[x[i] * y[j] for j ...] for i ...]``): each read
        # once, where NumPy's conversion would ask each for its values several times.
        obj = _host_values(obj)
    a = np.asarray(obj, dtype=dtype)
    if dtype is None and a.dtype.kind == "i" and not isinstance(obj, (np.ndarray, np.generic)):
        a = a.astype(np.int64)
    return from_numpy(a, chunks)


_ORDERS = ("K", "A", "C", "F", None)


_HOST_LEAF_LIMIT = 4096  # elements of a DArray in a nested sequence read to the caller


def _darray_leaves(obj):
    for o in obj:
        if isinstance(o, DArray):
            yield o
        elif isinstance(o, (list, tuple)):
            yield from _darray_leaves(o)


def _host_values(obj):
    """``obj`` (nested lists and tuples) with each DArray replaced by its values."""
    if isinstance(obj, DArray):
        return obj.to_numpy()
    if isinstance(obj, (list, tuple)):
        return [_host_values(o) for o in obj]
    return obj


def _holds_darrays(obj) -> bool:
    """Whether a nested list or tuple holds a DArray somewhere."""
    return isinstance(obj, (list, tuple)) and any(
        isinstance(o, DArray) or _holds_darrays(o) for o in obj)


def array(object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None,  # noqa: A002
          chunks="auto") -> DArray:
    """NumPy's ``array``: a DArray from a DArray (a copy unless ``copy`` is False or None;
    ``copy=False`` refuses a change of dtype, as NumPy's), from a list or tuple whose
    items are DArrays (stacked where they live, as NumPy stacks arrays), or from host data
    (nested lists, NumPy arrays, scalars, dask arrays), which is copied into global device
    memory. ``ndmin`` prepends length-1 axes; a DArray is C-ordered, so ``order`` is only
    validated; ``chunks`` is dgvm's."""
    if order not in _ORDERS:
        raise ValueError(f"dgvm.array.array: order must be one of 'K', 'A', 'C', 'F', not {order!r}")
    if isinstance(ndmin, builtins.bool) or not isinstance(ndmin, (int, np.integer)) or ndmin < 0:
        raise TypeError(f"dgvm.array.array: ndmin must be a non-negative int, not {ndmin!r}")
    if isinstance(object, DArray):
        target = object.dtype if dtype is None else check(dtype)
        if copy is False and target != object.dtype:
            raise ValueError(f"dgvm.array.array: copy=False, but the dtype changes from "
                             f"{object.dtype} to {target}, which needs a copy")
        x = astype(object, target, copy=builtins.bool(copy))
    elif _holds_darrays(object):
        if copy is False:
            raise ValueError("dgvm.array.array: copy=False, but stacking a sequence of arrays makes a new one")
        items = [array(o, copy=None, chunks=chunks) for o in object]
        shapes = {i.shape for i in items}
        if len(shapes) > 1:
            raise ValueError(f"dgvm.array.array: the items have shapes {sorted(shapes)}: an "
                             "inhomogeneous sequence makes no array")
        x = stack(items)
        if dtype is not None:
            x = astype(x, dtype, copy=False)
    else:
        if copy is False:
            raise ValueError("dgvm.array.array: copy=False, but host data always moves to device memory")
        x = asarray(object, dtype=dtype, chunks=chunks)
    for _ in range(ndmin - x.ndim):
        x = expand_dims(x, axis=0)
    return x


def copy(a, order="K", subok=False) -> DArray:
    """NumPy's ``copy``: a new DArray with the values of ``a`` (a DArray, copied where it
    lives; host data, copied into global device memory)."""
    return array(a, copy=True, order=order)
