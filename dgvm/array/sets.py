"""Set functions: ``unique_values``, ``unique_counts``, ``unique_inverse``, ``unique_all``;
NumPy's ``unique`` and ``isin``.

Partials on each worker, combined once on the caller: every chunk finds its own distinct
values (sorted, in the order of ``sort``), how often each occurs there and the flat
index (C order of the whole array) of its first occurrence, plus the flat indices of its
NaNs (``_engine.unique_ops``). The caller merges them: counts add, first indices take
the least. Every NaN is distinct, as the standard asks and NumPy 2's ``unique_*`` do:
each is an entry of its own, with count 1, after the numbers, in flat-index order
(complex values with a NaN part: in the order of ``sort``, then flat-index order, as
NumPy's sorted ``unique_all``). -0.0 and +0.0 are one value. The results (values,
counts, first indices) are new 1-d DArrays; the whole set of distinct values passes
through the caller, so a set as large as the array costs what gathering the array does.

``inverse_indices`` is made back on the workers, with the input's shape and chunks: each
chunk binary-searches its values among the distinct values it can hold (only the range
between its own least and greatest ones is read, from the ``values`` result).

NumPy's ``unique`` is the same, with its flags and its ``equal_nan`` (default: all NaNs
are one entry, whose index is the first NaN's and whose count is theirs). ``isin`` never
gathers: the test elements are sorted on the workers (``sort``) and each chunk of
``element`` finds its values among them where it lives (``searchsorted``, both sides: a
value is in them where the two differ).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.sort_keys import argsort_lines, sort_key
from dgvm.array._engine.unique_ops import Inverse, LocalUnique
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.data_types import astype
from dgvm.array.manipulation import reshape
from dgvm.array.searching import searchsorted
from dgvm.array.sorting import check_array, sort
from dgvm.protocol.errors import NotSupported

__all__ = ["isin", "unique", "unique_all", "unique_counts", "unique_inverse", "unique_values"]


class UniqueAllResult(NamedTuple):
    values: ArrayCore
    indices: ArrayCore
    inverse_indices: ArrayCore
    counts: ArrayCore


class UniqueCountsResult(NamedTuple):
    values: ArrayCore
    counts: ArrayCore


class UniqueInverseResult(NamedTuple):
    values: ArrayCore
    inverse_indices: ArrayCore


def _unique(x, name: str, inverse: bool, equal_nan: bool = False):
    """values, counts, first indices (NumPy) and, with ``inverse``, the inverse DArray.
    ``equal_nan``: the NaNs are one entry (the first of them in sorted order), not one each."""
    check_array(x, name)
    parts = blockwise.collect(LocalUnique(x.shape), x, name)
    blocks = sorted(parts)
    values = np.concatenate([parts[b][0] for b in blocks])
    counts = np.concatenate([parts[b][1] for b in blocks])
    firsts = np.concatenate([parts[b][2] for b in blocks])
    nans = np.concatenate([parts[b][3] for b in blocks])
    nan_values = np.concatenate([parts[b][4] for b in blocks])
    by_index = np.argsort(nans, kind="stable")
    nan_order = by_index[argsort_lines(sort_key(nan_values[by_index], np).reshape(1, -1), False, np)[0]]
    keys = sort_key(values, np)
    order = argsort_lines(keys.reshape(1, -1), False, np)[0]
    keys, values, counts, firsts = keys[order], values[order], counts[order], firsts[order]
    new = np.ones(len(keys), bool)
    new[1:] = keys[1:] != keys[:-1]
    at = np.flatnonzero(new)
    distinct = keys[at]
    if len(at):
        values = values[at]
        counts = np.add.reduceat(counts, at)
        firsts = np.minimum.reduceat(firsts, at)
    rank = np.empty(len(nans), np.int64)  # the entry of each NaN, by its place in nans
    rank[nan_order] = np.arange(len(nans))
    if equal_nan and len(nans):
        values = np.concatenate([values, nan_values[nan_order[:1]]])
        counts = np.concatenate([counts, [len(nans)]])
        firsts = np.concatenate([firsts, nans[nan_order[:1]]])
        rank[:] = 0
    else:
        values = np.concatenate([values, nan_values[nan_order]])
        counts = np.concatenate([counts, np.ones(len(nans), np.int64)])
        firsts = np.concatenate([firsts, nans[nan_order]])
    client = x.client  # a deferred x stays unstored
    result = type(x).from_host(values, client=client)
    if not inverse:
        return result, counts, firsts, None
    ranges, nan_ranks = {}, {}
    offset = 0  # where block b's NaNs start in nans (joined in block order)
    for b in blocks:
        own = sort_key(parts[b][0], np)
        if len(own):
            ranges[b] = (int(np.searchsorted(distinct, own[0], side="left")),
                         int(np.searchsorted(distinct, own[-1], side="right")))
        else:
            ranges[b] = (0, 0)
        if len(parts[b][3]):  # each NaN's entry, for the chunk's NaNs in C order
            at = offset + np.argsort(parts[b][3], kind="stable")
            nan_ranks[b] = len(distinct) + rank[at]
        offset += len(parts[b][3])
    starts = [np.concatenate([[0], np.cumsum(c)]).astype(np.int64) for c in x.chunks]
    inv = type(x).allocated(x.shape, np.int64, x.chunks, colocate=x, client=client)
    blockwise.run(Inverse(starts, ranges, nan_ranks), inv, [x, result], f"{name}-inverse")
    return result, counts, firsts, inv


@empty_aware
def unique_values(x, /):
    """The distinct values of ``x`` (flattened), sorted; each NaN is one of them."""
    return _unique(x, "unique_values", False)[0]


@empty_aware
def unique_counts(x, /) -> UniqueCountsResult:
    """The distinct values and how often each occurs."""
    values, counts, _, _ = _unique(x, "unique_counts", False)
    return UniqueCountsResult(values, type(x).on_caller(counts, x.client))


@empty_aware
def unique_inverse(x, /) -> UniqueInverseResult:
    """The distinct values and, per element of ``x`` (its shape), the index of its value."""
    values, _, _, inv = _unique(x, "unique_inverse", True)
    return UniqueInverseResult(values, inv)


@empty_aware
def unique_all(x, /) -> UniqueAllResult:
    """Distinct values, the flat index of each one's first occurrence, the inverse
    indices (``x``'s shape) and the counts."""
    values, counts, firsts, inv = _unique(x, "unique_all", True)
    return UniqueAllResult(values, type(x).on_caller(firsts, x.client), inv, type(x).on_caller(counts, x.client))


@empty_aware
def unique(ar, /, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, sorted=True):  # noqa: A002  (NumPy's name)
    """NumPy's ``unique``: the sorted distinct values of ``ar`` (flattened), and with the
    flags the flat index of each one's first occurrence, the inverse indices (``ar``'s
    shape) and the counts, in that order. ``equal_nan``: the NaNs are one value."""
    check_array(ar, "unique")
    if axis is not None:
        raise NotSupported("dgvm.array.unique(axis=) is not supported by dgvm.array; it finds the "
                           "distinct values of the flattened array")
    values, counts, firsts, inv = _unique(ar, "unique", bool(return_inverse), bool(equal_nan))
    out = [values]
    if return_index:
        out.append(type(ar).on_caller(firsts, ar.client))
    if return_inverse:
        out.append(inv)
    if return_counts:
        out.append(type(ar).on_caller(counts, ar.client))
    return out[0] if len(out) == 1 else tuple(out)


@empty_aware
def isin(element, test_elements, /, assume_unique=False, invert=False, *, kind=None):
    """Where the elements of ``element`` are among ``test_elements`` (a DArray, or a
    scalar or a sequence of the caller's), of ``element``'s shape; NaN is never among
    them. ``invert``: where they are not."""
    check_array(element, "isin")
    if kind not in (None, "sort", "table"):
        raise ValueError(f"dgvm.array.isin: kind must be None, 'sort' or 'table', got {kind!r}")
    if not isinstance(test_elements, ArrayCore):
        values = np.asarray(test_elements)
        if values.dtype.kind not in "biufc":
            raise TypeError("dgvm.array.isin: test_elements must be a DArray or numbers, got "
                            f"{type(test_elements).__name__}")
        test_elements = type(element).from_host(values, client=element.client)
    if test_elements.size == 0:
        found = apply("logical_and", element, False)
    else:
        dt = np.result_type(element.dtype, test_elements.dtype)
        tests = sort(reshape(astype(test_elements, dt, copy=False), (-1,)))
        e = astype(element, dt, copy=False)
        found = apply("greater", searchsorted(tests, e, side="right"), searchsorted(tests, e, side="left"))
        if dt.kind in "fc":  # NaN equals nothing, although it sorts among the NaNs
            found = apply("logical_and", found, apply("logical_not", apply("isnan", element)))
    return apply("logical_not", found) if invert else found
