"""Searching functions: ``argmax``, ``argmin``, ``count_nonzero``, ``nonzero``,
``searchsorted``, ``where``.

``searchsorted``: the caller learns the first value of every block of ``x1`` (one small
``collect``); each chunk of ``x2`` is answered on its home worker, which reads only the
blocks of ``x1`` its values fall in, in the order of ``sort`` (NaN last)
(``_engine.search_ops``).

``nonzero``: a first pass counts the nonzero elements of every chunk; the result, in C
order like NumPy's, is cut into pieces that follow the row blocks (blocks along axis 0,
each a contiguous run of the C order), each piece placed beside the input chunk of its
row block with the most nonzeros; a second pass makes every piece on its home worker
from its row block. An all-zero input gives arrays with no elements (held on the caller).
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.reduction_ops import arg_reduce
from dgvm.array._engine.search_ops import CountNonzero, Gather1d, Heads, MinMax, Nonzero, Search
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.sorting import check_array
from dgvm.array.statistical import sum as total_of
from dgvm.protocol import chunk_grid

__all__ = ["argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where"]


@empty_aware
def argmax(x, /, axis=None, *, keepdims=False):
    """Index of the largest element over ``axis`` (the first of equals; NaN first, as NumPy)."""
    return arg_reduce(x, "argmax", axis, keepdims)


@empty_aware
def argmin(x, /, axis=None, *, keepdims=False):
    """Index of the smallest element over ``axis`` (the first of equals; NaN first, as NumPy)."""
    return arg_reduce(x, "argmin", axis, keepdims)


@empty_aware
def where(condition, x1, x2, /):
    """Elements of ``x1`` where ``condition`` is true, else of ``x2``."""
    return apply("where", condition, x1, x2)


@empty_aware
def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Indices where the values of ``x2`` would be inserted into the sorted 1-d ``x1``
    (``side="left"``: before equal values, ``"right"``: after them); int64, with
    ``x2``'s shape and chunks. ``sorter``: int indices that sort ``x1`` (x1 unsorted)."""
    check_array(x1, "searchsorted")
    check_array(x2, "searchsorted")
    if x1.ndim != 1:
        raise ValueError(f"dgvm.array.searchsorted: x1 must be 1-d, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"dgvm.array.searchsorted: side must be 'left' or 'right', got {side!r}")
    client = x1.alloc.client
    if sorter is not None:
        if not isinstance(sorter, ArrayCore) or sorter.dtype.kind not in "iu" or sorter.shape != x1.shape:
            raise TypeError(
                "dgvm.array.searchsorted: sorter must be an integer DArray of x1's shape "
                f"{x1.shape}, got {getattr(sorter, 'dtype', type(sorter).__name__)} "
                f"of shape {getattr(sorter, 'shape', None)}"
            )
        bounds = np.stack(list(blockwise.collect(MinMax(), sorter, "searchsorted-sorter").values()))
        if bounds[:, 0].min() < 0 or bounds[:, 1].max() >= x1.shape[0]:
            raise IndexError(
                f"dgvm.array.searchsorted: sorter holds indices in [{bounds[:, 0].min()}, "
                f"{bounds[:, 1].max()}]; x1 has {x1.shape[0]} elements"
            )
        ordered = type(x1).allocated(x1.shape, x1.dtype, sorter.chunks, colocate=sorter, client=client)
        blockwise.run(Gather1d(), ordered, [sorter, x1], "searchsorted-sorter")
        x1 = ordered
    heads = blockwise.collect(Heads(), x1, "searchsorted-heads")
    heads = np.concatenate([heads[(b,)] for b in range(x1.numblocks[0])])
    starts = np.concatenate([[0], np.cumsum(x1.chunks[0])]).astype(np.int64)
    out = type(x2).allocated(x2.shape, np.int64, x2.chunks, colocate=x2, client=client)
    blockwise.run(Search(side == "right", heads, starts), out, [x2, x1], "searchsorted")
    return out


@empty_aware
def count_nonzero(x, /, axis=None, *, keepdims=False):
    """How many elements of ``x`` are nonzero (True, NaN count), over ``axis``; int64.
    A sum of ``x != 0``: one fused pass over ``x``, the result kept on the caller."""
    if not isinstance(x, ArrayCore):
        raise TypeError(f"dgvm.array.count_nonzero expects a DArray, got {type(x).__name__}")
    return total_of(apply("not_equal", x, 0), axis=axis, keepdims=keepdims, dtype=np.int64)


@empty_aware
def nonzero(x, /):
    """The indices of the nonzero elements, one int64 1-d array per axis, in C order."""
    if not isinstance(x, ArrayCore):
        raise TypeError(f"dgvm.array.nonzero expects a DArray, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("dgvm.array.nonzero of a 0-d array is not defined (as in NumPy 2 and "
                         "the standard); reshape it to 1-d first")
    counts = blockwise.collect(CountNonzero(tuple(range(x.ndim))), x, "nonzero-count")
    counts = {b: int(np.asarray(c).sum()) for b, c in counts.items()}
    nrow = x.numblocks[0]
    per_row = np.zeros(nrow, np.int64)
    for b, c in counts.items():
        per_row[b[0]] += c
    total = int(per_row.sum())
    if total == 0:  # held on the caller (zero_size)
        return tuple(type(x).empty_on_caller((0,), np.int64, x.client) for _ in range(x.ndim))
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
        o = type(x).allocated((total,), np.int64, (tuple(pieces),), colocate=(x, picks), client=x.alloc.client)
        blockwise.run(Nonzero(axis, firsts, rows, x.shape), o, [x], "nonzero")
        out.append(o)
    return tuple(out)
