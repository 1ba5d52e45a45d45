"""Searching: ``searchsorted``, ``nonzero`` and ``count_nonzero``.

(``argmax``, ``argmin`` live with the reductions, ``where`` with the elementwise functions.)

``searchsorted``: the caller learns the first value of every block of ``x1`` (one small
``collect``); each chunk of ``x2`` is answered on its home worker, which reads only the
blocks of ``x1`` its values fall in (a binary search among the blocks' first values,
then one in each block needed), in the order of ``dgvm.array.sorting`` (NaN last).

``nonzero``: a first pass counts the nonzero elements of every chunk; the result, in C
order like NumPy's, is cut into pieces that follow the row blocks (blocks along axis 0,
each a contiguous run of the C order), each piece placed beside the input chunk of its
row block with the most nonzeros; a second pass makes every piece on its home worker
from its row block. An all-zero input has an empty result, which a DArray cannot hold
yet: ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.protocol import chunk_grid
from dgvm.array._engine import blockwise
from dgvm.array.darray import DArray
from dgvm.array.sorting import check_array, count_before, sort_key


# -- searchsorted ------------------------------------------------------------------------

@dataclass
class _Heads:
    """Partial: the first element of a 1-d chunk."""

    def partial(self, chunk, lo, hi, xp):
        return chunk[:1].copy()  # never a view of the store's memory


@dataclass
class _MinMax:
    def partial(self, chunk, lo, hi, xp):
        return np.asarray([int(chunk.min()), int(chunk.max())])


@dataclass
class _Search:
    """Blockwise: positions in ``x1`` (input 1, sorted) of the values of ``x2`` (input 0)."""

    inclusive: bool  # side="right"
    heads: np.ndarray  # first value of every block of x1
    starts: np.ndarray  # block starts of x1

    def block(self, read, lo, hi, xp):
        v = read(0, lo, hi)
        q = sort_key(v.reshape(1, -1), xp)
        heads = sort_key(xp.asarray(self.heads).reshape(1, -1), xp)
        # Blocks before ``j - 1`` lie wholly before each value, blocks from ``j`` on after it.
        j = count_before(heads, q, self.inclusive, False, xp)[0] - 1
        out = xp.zeros(q.shape[1], dtype=np.int64)
        for b in xp.unique(j).tolist():
            if b < 0:
                continue
            sel = j == b
            a = sort_key(read(1, [int(self.starts[b])], [int(self.starts[b + 1])]).reshape(1, -1), xp)
            out[sel] = count_before(a, q[:, sel], self.inclusive, False, xp)[0] + int(self.starts[b])
        return out.reshape(v.shape)


@dataclass
class _Gather1d:
    """Blockwise: ``x[idx]`` for a 1-d ``x`` (input 1) and the indices of input 0."""

    def block(self, read, lo, hi, xp):
        idx = read(0, lo, hi)
        first, last = int(idx.min()), int(idx.max()) + 1
        return read(1, [first], [last])[idx - first]


def searchsorted(x1, x2, /, *, side="left", sorter=None) -> DArray:
    """Indices where the values of ``x2`` would be inserted into the sorted 1-d ``x1``
    (``side="left"``: before equal values, ``"right"``: after them); int64, with
    ``x2``'s shape and chunks. ``sorter``: int indices that sort ``x1`` (x1 unsorted)."""
    from dgvm.array.creation import empty

    check_array(x1, "searchsorted")
    check_array(x2, "searchsorted")
    if x1.ndim != 1:
        raise ValueError(f"dgvm.array.searchsorted: x1 must be 1-d, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"dgvm.array.searchsorted: side must be 'left' or 'right', got {side!r}")
    client = x1.alloc.client
    if sorter is not None:
        if not isinstance(sorter, DArray) or sorter.dtype.kind not in "iu" or sorter.shape != x1.shape:
            raise TypeError(
                "dgvm.array.searchsorted: sorter must be an integer DArray of x1's shape "
                f"{x1.shape}, got {getattr(sorter, 'dtype', type(sorter).__name__)} "
                f"of shape {getattr(sorter, 'shape', None)}"
            )
        bounds = np.stack(list(blockwise.collect(_MinMax(), sorter, "searchsorted-sorter").values()))
        if bounds[:, 0].min() < 0 or bounds[:, 1].max() >= x1.shape[0]:
            raise IndexError(
                f"dgvm.array.searchsorted: sorter holds indices in [{bounds[:, 0].min()}, "
                f"{bounds[:, 1].max()}]; x1 has {x1.shape[0]} elements"
            )
        ordered = empty(x1.shape, x1.dtype, sorter.chunks, colocate=sorter, client=client)
        blockwise.run(_Gather1d(), ordered, [sorter, x1], "searchsorted-sorter")
        x1 = ordered
    heads = blockwise.collect(_Heads(), x1, "searchsorted-heads")
    heads = np.concatenate([heads[(b,)] for b in range(x1.numblocks[0])])
    starts = np.concatenate([[0], np.cumsum(x1.chunks[0])]).astype(np.int64)
    out = empty(x2.shape, np.int64, x2.chunks, colocate=x2, client=client)
    blockwise.run(_Search(side == "right", heads, starts), out, [x2, x1], "searchsorted")
    return out


# -- count_nonzero ------------------------------------------------------------------------

def count_nonzero(x, /, *, axis=None, keepdims=False) -> DArray:
    """How many elements of ``x`` are nonzero (True, NaN count), over ``axis``; int64.
    A sum of ``x != 0``: one fused pass over ``x``, the result kept on the caller."""
    from dgvm.array.elementwise import apply
    from dgvm.array.reductions import sum as total

    if not isinstance(x, DArray):
        raise TypeError(f"dgvm.array.count_nonzero expects a DArray, got {type(x).__name__}")
    return total(apply("not_equal", x, 0), axis=axis, keepdims=keepdims, dtype=np.int64)


# -- nonzero --------------------------------------------------------------------------------

@dataclass
class _Nonzero:
    """Blockwise: coordinate ``axis`` of the nonzero elements ``[lo, hi)`` (C order),
    taken from the row block that holds them."""

    axis: int
    firsts: np.ndarray  # position in the result of each row block's first nonzero
    rows: np.ndarray  # row block starts along axis 0
    shape: tuple

    def block(self, read, lo, hi, xp):
        s = int(np.searchsorted(self.firsts, lo[0], side="right")) - 1
        r0, r1 = int(self.rows[s]), int(self.rows[s + 1])
        region = read(0, [r0] + [0] * (len(self.shape) - 1), [r1] + list(self.shape[1:]))
        base = int(self.firsts[s])
        found = xp.nonzero(region)[self.axis][lo[0] - base: hi[0] - base].astype(np.int64)
        return found + r0 if self.axis == 0 else found


@dataclass
class _CountNonzero:
    """Partial: the nonzero elements of a chunk over ``axes``."""

    axes: tuple

    def partial(self, chunk, lo, hi, xp):
        return xp.sum(chunk != 0, axis=self.axes, keepdims=True, dtype=np.int64)


def nonzero(x, /) -> tuple[DArray, ...]:
    """The indices of the nonzero elements, one int64 1-d array per axis, in C order."""
    from dgvm.array.creation import empty

    if not isinstance(x, DArray):
        raise TypeError(f"dgvm.array.nonzero expects a DArray, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("dgvm.array.nonzero of a 0-d array is not defined (as in NumPy 2 and "
                         "the standard); reshape it to 1-d first")
    counts = blockwise.collect(_CountNonzero(tuple(range(x.ndim))), x, "nonzero-count")
    counts = {b: int(np.asarray(c).sum()) for b, c in counts.items()}
    nrow = x.numblocks[0]
    per_row = np.zeros(nrow, np.int64)
    for b, c in counts.items():
        per_row[b[0]] += c
    total = int(per_row.sum())
    if total == 0:
        from dgvm.array._engine import zero_size

        return tuple(zero_size.array((0,), np.int64, x.client) for _ in range(x.ndim))
    firsts = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
    cap = chunk_grid.normalize("auto", (total,), np.int64)[0][0]
    pieces, picks = [], []
    for s in range(nrow):
        if per_row[s] == 0:
            continue
        best = max((b for b in counts if b[0] == s), key=lambda b: counts[b])
        k = chunk_grid.flat_index(best, x.numblocks)
        n = int(per_row[s])
        step = -(-n // -(-n // cap))  # even pieces of at most ``cap``
        for p in range(0, n, step):
            pieces.append(min(step, n - p))
            picks.append(k)
    rows = np.concatenate([[0], np.cumsum(x.chunks[0])]).astype(np.int64)
    out = []
    for axis in range(x.ndim):
        o = empty((total,), np.int64, (tuple(pieces),), colocate=(x, picks), client=x.alloc.client)
        blockwise.run(_Nonzero(axis, firsts, rows, x.shape), o, [x], "nonzero")
        out.append(o)
    return tuple(out)
