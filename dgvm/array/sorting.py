"""Sorting functions: ``sort`` and ``argsort`` along any axis, stable, NaN last.

The order is ``_engine.sort_keys``' (NumPy's, NaN after +inf; descending is its reverse,
ties kept in their original order). One block along the axis: each chunk sorts its lines
where it lives. Several blocks: each chunk sorts its lines where it lives, then the
sorted runs are regrouped into chunks that hold whole lines (``_engine.whole_lines``),
merged there, and cut back into the input's chunks; where a single line is larger than
the input's largest chunk, an exact distributed merge (``_engine.sort_splits``). The
result keeps the input's chunks and their places.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.layout_ops import Copy
from dgvm.array._engine.sort_keys import block_starts
from dgvm.array._engine.sort_ops import LocalSort, Merge, SortRuns, TakeLocal
from dgvm.array._engine.sort_splits import splits
from dgvm.array._engine.whole_lines import line_chunks, line_picks
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.manipulation import reshape

__all__ = ["argsort", "sort"]


def check_array(x, name: str) -> None:
    """A DArray, or the TypeError of ``dgvm.array.name``."""
    if not isinstance(x, ArrayCore):
        raise TypeError(f"dgvm.array.{name} expects a DArray, got {type(x).__name__}")


def _axis(axis, x, name: str) -> int:
    if x.ndim == 0:
        raise ValueError(f"dgvm.array.{name} needs an array of at least one dimension, got a 0-d array")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"dgvm.array.{name}: axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise np.exceptions.AxisError(
            f"dgvm.array.{name}: axis {axis} is out of bounds for an array of {x.ndim} dimensions"
        )
    return int(axis) % x.ndim


def _sorted(x, axis: int, descending: bool, indices: bool, name: str):
    client = x.alloc.client
    dtype = np.dtype(np.int64) if indices else x.dtype
    new = type(x).allocated
    if x.numblocks[axis] == 1:
        out = new(x.shape, dtype, x.chunks, colocate=x, client=client, zero=False)
        blockwise.run(LocalSort(axis, descending, indices), out, [x], name)
        return out
    s = new(x.shape, x.dtype, x.chunks, colocate=x, client=client, zero=False)
    if indices:
        i = new(x.shape, np.int64, x.chunks, colocate=x, client=client, zero=False)
        blockwise.run(LocalSort(axis, descending, True), i, [x], f"{name}-local")
        blockwise.run(TakeLocal(axis), s, [x, i], f"{name}-local-values")
        inputs = [s, i]
    else:
        blockwise.run(LocalSort(axis, descending, False), s, [x], f"{name}-local")
        inputs = [s]
    lines = line_chunks(x, axis)
    if lines is not None:
        # The sorted runs of each line merged where a chunk of whole lines is put, then
        # cut back into x's chunks: no split to find.
        whole = new(x.shape, dtype, lines, colocate=(x, line_picks(x, lines, axis)), client=client, zero=False)
        blockwise.run(SortRuns(axis, descending, indices), whole, inputs, f"{name}-lines")
        out = new(x.shape, dtype, x.chunks, colocate=x, client=client, zero=False)
        blockwise.run(Copy(), out, [whole], name)
        return out
    c = splits(s, axis, descending)
    # Made once the splits are known: a failure before leaves no result allocated.
    out = new(x.shape, dtype, x.chunks, colocate=x, client=client)
    blockwise.run(Merge(axis, descending, indices, block_starts(x.chunks), c), out, inputs, name)
    return out  # the temporaries free themselves once the merge has read them


_KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")


def _numpy_args(x, axis, kind, order, name: str):
    """NumPy's ``axis`` (None: the flattened array), ``kind`` (every kind sorts stably
    here) and ``order`` (for fields, which a DArray has not): the array and axis to sort."""
    check_array(x, name)
    if kind not in _KINDS:
        raise ValueError(f"dgvm.array.{name}: kind must be one of {_KINDS[1:]}, not {kind!r}")
    if order is not None:
        raise ValueError(f"dgvm.array.{name}: order= names fields, and a DArray has none")
    if axis is None:
        return reshape(x, (-1,)), 0
    return x, _axis(axis, x, name)


@empty_aware
def sort(x, /, axis=-1, kind=None, order=None, *, descending=False, stable=True):
    """A sorted copy of ``x`` along ``axis`` (same shape and chunks); stable, NaN last
    (first when ``descending``). ``axis`` may be given by position and None sorts the
    flattened array, as NumPy's; every ``kind`` sorts stably."""
    x, axis = _numpy_args(x, axis, kind, order, "sort")
    return _sorted(x, axis, bool(descending), False, "sort")


@empty_aware
def argsort(x, /, axis=-1, kind=None, order=None, *, descending=False, stable=True):
    """The int64 indices along ``axis`` that sort ``x`` (stable: ties keep their order,
    also when ``descending``). ``axis`` may be given by position and None gives indices
    into the flattened array, as NumPy's; every ``kind`` sorts stably (NumPy's default
    quicksort may order ties otherwise)."""
    x, axis = _numpy_args(x, axis, kind, order, "argsort")
    return _sorted(x, axis, bool(descending), True, "argsort")
