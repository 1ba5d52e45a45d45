"""``x[mask] = value`` on the workers, for a mask of some of x's axes.

A mask of x's axes ``axis .. axis + k`` is repeated along the others where x's chunks
live (``mask_select.mask_along``). A scalar (or a value of one element) is written
where it is true (``MaskAssign``). An array is laid out as one value per true
position, in C order, in a 1-d array beside x's chunks (made from the value on the
workers: copied, reshaped, or broadcast first), and each chunk of x writes its own
values (``MaskWrite``), found from the mask's counts per chunk (or per line, where
x's chunks cut its rows: ``mask_select.counts``) as ``x[mask]`` finds them. The value
is checked as NumPy checks it before anything is written: a mask alone as the key
takes a value of 0 or 1 dimensions, of one element or one per true position; other
keys broadcast the value over the selection.
"""

from __future__ import annotations

import math

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import read_while_written
from dgvm.array._engine.assign_ops import MaskAssign, MaskWrite
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.keys import fitted, storable
from dgvm.array._engine.layout_ops import Copy, Reshape
from dgvm.array._engine.mask_select import counts, mask_along, row_runs
from dgvm.array._engine.tree_op import Elementwise
from dgvm.protocol import chunk_grid


def _scalar(value, dtype):
    """A value of one element as the scalar ``MaskAssign`` writes."""
    if isinstance(value, ArrayCore):
        return value.item()
    storable(value, dtype)
    return np.asarray(value, dtype=dtype).reshape(()).item()


def _checked(value, total: int, sel: tuple, alone: bool):
    """``value`` checked against a selection of shape ``sel`` with ``total`` elements,
    as NumPy checks it; (the value, its shape)."""
    vshape = tuple(np.shape(value))
    if not alone:
        return fitted(value, sel)
    if len(vshape) > 1:
        raise TypeError("NumPy boolean array indexing assignment requires a 0 or 1-dimensional input, "
                        f"input has {len(vshape)} dimensions")
    if vshape and vshape[0] not in (1, total):
        raise ValueError(f"NumPy boolean array indexing assignment cannot assign {vshape[0]} input values "
                         f"to the {total} output values where the mask is true")
    return value, vshape


def assign_masked(x, mask, axis: int, value, alone: bool) -> None:
    """``x[(slice(None),) * axis + (mask,)] = value`` for an ``x`` that owns its memory
    and has elements; ``alone``: the mask is the whole key (NumPy's checks of the value
    differ)."""
    if isinstance(value, list):
        value = np.asarray(value)
    if not isinstance(value, (ArrayCore, np.ndarray)):  # a scalar: no count needed
        storable(value, x.dtype)
        blockwise.run(MaskAssign(_scalar(value, x.dtype)), x, [x, mask_along(x, mask, axis)], "setitem-mask")
        return
    full = mask_along(x, mask, axis)
    rows_whole, totals, lines = counts(x, full)
    total = sum(totals.values())
    k = mask.ndim
    sel = x.shape[:axis] + (total // math.prod(x.shape[:axis] + x.shape[axis + k:]),) + x.shape[axis + k:]
    value, vshape = _checked(value, total, sel, alone)
    written = sorted(b for b, t in totals.items() if t)
    if not written:
        if not isinstance(value, ArrayCore):
            storable(value, x.dtype)
        return
    chunks = [chunk_grid.flat_index(b, x.numblocks) for b in written]
    if math.prod(vshape) == 1:
        blockwise.run(MaskAssign(_scalar(value, x.dtype)), x, [x, full], "setitem-mask", chunks)
        return
    per_row = np.zeros(x.numblocks[0], dtype=np.int64)
    firsts = [[] for _ in range(x.numblocks[0])]
    for b in written:
        per_row[b[0]] += totals[b]
        firsts[b[0]].append(b)
    if rows_whole:  # one run per chunk written, beside it
        runs = [int(n) for n in per_row if n]
        picks = [chunk_grid.flat_index(f[0], x.numblocks) for f in firsts if f]
    else:
        runs, picks = row_runs(x, per_row, firsts)
    values = _laid_out(x, value, sel, total, runs, picks)
    row_starts = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
    edges = [np.concatenate([[0], np.cumsum(c)]).astype(np.int64) for c in x.chunks]
    inputs = [x, full, values] + ([] if rows_whole else [lines])
    blockwise.run(MaskWrite(row_starts, edges, rows_whole), x, inputs, "setitem-mask", chunks)


def _laid_out(x, value, sel: tuple, total: int, runs, picks):
    """The value broadcast over the selection (``sel``), as a 1-d array of ``total``
    elements in C order, cut into ``runs`` placed beside x's chunks ``picks``; made on
    the workers (a host value is stored first, as it is, when it must be broadcast)."""
    if not isinstance(value, ArrayCore):
        value = np.asarray(value, dtype=x.dtype)
        if value.size == total:
            return type(x).from_host(value.reshape(-1), chunks=(tuple(runs),), colocate=(x, picks), client=x.client)
        value = type(x).from_host(value, client=x.client)
    else:
        value = read_while_written(value, x)
    out = type(x).allocated((total,), value.dtype, (tuple(runs),), colocate=(x, picks), client=x.client, zero=False)
    if value.size != total:  # repeated over the selection's shape first
        wide = type(x).allocated(sel, value.dtype, client=x.client, zero=False)
        blockwise.run(Elementwise(("in", 0), [tuple(value.shape)], sel), wide, [value], "setitem-broadcast")
        value = wide
    op = Copy() if value.ndim == 1 else Reshape(tuple(value.shape), (total,))
    blockwise.run(op, out, [value], "setitem-values")
    return out
