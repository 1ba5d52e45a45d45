"""Set functions: ``unique_values``, ``unique_counts``, ``unique_inverse``, ``unique_all``.

Partials on each worker, combined once on the caller: every chunk finds its own distinct
values (sorted, in the order of ``dgvm.array.sorting``), how often each occurs there and
the flat index (C order of the whole array) of its first occurrence, plus the flat
indices of its NaNs. The caller merges them: counts add, first indices take the least.
Every NaN is distinct, as the standard asks and NumPy 2's ``unique_*`` do: each is an
entry of its own, with count 1, after the numbers, in flat-index order (complex values
with a NaN part: in the sort order of ``dgvm.array.sorting``, then flat-index order, as
NumPy's sorted ``unique_all``). -0.0 and +0.0 are one value. The results (values, counts, first indices) are new 1-d DArrays; the
whole set of distinct values passes through the caller, so a set as large as the array
costs what gathering the array does.

``inverse_indices`` is made back on the workers, with the input's shape and chunks: each
chunk binary-searches its values among the distinct values it can hold (only the range
between its own least and greatest ones is read, from the ``values`` result).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array.darray import DArray
from dgvm.array._engine.deferred import on_caller  # results combined here stay on the caller
from dgvm.array.sorting import argsort_lines, block_of, check_array, count_before, sort_key


class UniqueAllResult(NamedTuple):
    values: DArray
    indices: DArray
    inverse_indices: DArray
    counts: DArray


class UniqueCountsResult(NamedTuple):
    values: DArray
    counts: DArray


class UniqueInverseResult(NamedTuple):
    values: DArray
    inverse_indices: DArray


def _flat_index(local, chunk_shape, lo, shape, xp):
    """Flat indices in the whole array of flat indices ``local`` within a chunk."""
    out = xp.zeros(local.shape, dtype=np.int64)
    rest = local
    for a in reversed(range(len(shape))):
        coord = rest % chunk_shape[a] + lo[a]
        rest = rest // chunk_shape[a]
        stride = int(np.prod(shape[a + 1:], dtype=np.int64))
        out = out + coord * stride
    return out


@dataclass
class _LocalUnique:
    """Partial: (distinct values, their counts, first flat indices, NaNs' flat indices,
    the NaNs themselves)."""

    shape: tuple

    def partial(self, chunk, lo, hi, xp):
        flat = chunk.reshape(-1)
        keys = sort_key(flat, xp)
        order = argsort_lines(keys.reshape(1, -1), False, xp)[0]
        ordered = keys[order]
        n = int(ordered.shape[0])
        if flat.dtype.kind in "fc":
            n = int(xp.count_nonzero(~xp.isnan(ordered)))  # NaNs sort last
        new = xp.ones(n, dtype=bool)
        if n > 1:
            new[1:] = ordered[1:n] != ordered[: n - 1]
        at = xp.nonzero(new)[0]
        counts = xp.diff(xp.concatenate([at, xp.asarray([n], dtype=at.dtype)])).astype(np.int64)
        first = order[at]  # stable: the earliest of equal values
        to_flat = lambda i: _flat_index(i, chunk.shape, lo, self.shape, xp)  # noqa: E731
        return flat[first], counts, to_flat(first), to_flat(order[n:]), flat[order[n:]]


@dataclass
class _Inverse:
    """Blockwise: each element's index among the distinct values (input 1)."""

    starts: list
    ranges: dict  # block -> (first, last + 1) of the distinct values the chunk holds
    nan_ranks: dict  # block -> the entries of the chunk's NaNs (C order), or absent

    def block(self, read, lo, hi, xp):
        block = block_of(self.starts, lo)
        x = read(0, lo, hi)
        q = sort_key(x.reshape(1, -1), xp)
        first, last = self.ranges[block]
        if last > first:
            values = sort_key(read(1, [first], [last]).reshape(1, -1), xp)
            out = count_before(values, q, False, False, xp)[0] + first
        else:
            out = xp.zeros(q.shape[1], dtype=np.int64)
        nans = self.nan_ranks.get(block)
        if nans is not None:
            out[xp.isnan(q[0])] = xp.asarray(nans)
        return out.reshape(x.shape)


def _unique(x, name: str, inverse: bool):
    """values, counts, first indices (NumPy) and, with ``inverse``, the inverse DArray."""
    from dgvm.array.creation import empty, from_numpy

    check_array(x, name)
    parts = blockwise.collect(_LocalUnique(x.shape), x, name)
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
    values = np.concatenate([values, nan_values[nan_order]])
    counts = np.concatenate([counts, np.ones(len(nans), np.int64)])
    firsts = np.concatenate([firsts, nans[nan_order]])
    client = x.client  # a deferred x stays unstored
    result = from_numpy(values, client=client)
    if not inverse:
        return result, counts, firsts, None
    ranges, nan_ranks = {}, {}
    rank = np.empty(len(nans), np.int64)  # the entry of each NaN, by its place in nans
    rank[nan_order] = np.arange(len(nans))
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
    inv = empty(x.shape, np.int64, x.chunks, colocate=x, client=client)
    blockwise.run(_Inverse(starts, ranges, nan_ranks), inv, [x, result], f"{name}-inverse")
    return result, counts, firsts, inv


def unique_values(x, /) -> DArray:
    """The distinct values of ``x`` (flattened), sorted; each NaN is one of them."""
    return _unique(x, "unique_values", False)[0]


def unique_counts(x, /) -> UniqueCountsResult:
    """The distinct values and how often each occurs."""
    values, counts, _, _ = _unique(x, "unique_counts", False)
    return UniqueCountsResult(values, on_caller(counts, x.client))


def unique_inverse(x, /) -> UniqueInverseResult:
    """The distinct values and, per element of ``x`` (its shape), the index of its value."""
    values, _, _, inv = _unique(x, "unique_inverse", True)
    return UniqueInverseResult(values, inv)


def unique_all(x, /) -> UniqueAllResult:
    """Distinct values, the flat index of each one's first occurrence, the inverse
    indices (``x``'s shape) and the counts."""
    values, counts, firsts, inv = _unique(x, "unique_all", True)
    return UniqueAllResult(values, on_caller(firsts, x.client), inv, on_caller(counts, x.client))
