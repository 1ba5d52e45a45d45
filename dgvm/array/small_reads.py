"""Reading a few elements of an array without computing anything: ``x[i, j]``, ``x[3]``.

A NumPy program reads single elements all the time (``float(x[i, j])``, loops over
``x[k]``). Such a read is a deferred view (``dgvm.array.views``); computing it would
allocate a result, run a task per worker and read it back, three round trips for
eight bytes. A view of at most ``MAX_ELEMENTS`` elements of an array that holds its
values is instead read straight from the chunks of that array: each run of elements
that follow one another in one chunk is a (chunk, byte offset, length) piece, all in
one read request per worker (``Allocation.get``).
"""

from __future__ import annotations

import numpy as np

MAX_ELEMENTS = 4096


def read_view(x) -> np.ndarray | None:
    """The values of ``x`` if it is a small view of a computed array, else None."""
    d = x._deferred
    if d is None or d.host is not None or d.expr != ("in", 0) or x.size > MAX_ELEMENTS:
        return None
    base, view = d.inputs[0], d.views[0]
    if (view is None or base.ndim == 0 or base._alloc is None or base._deferred is not None
            or base.alloc.freed):
        return None
    from dgvm.kernels.launch import settle

    settle(base._pending.writes)  # the values as of the view: no write to base came since
    coords = _input_coordinates(view, x.shape)
    raw = base.alloc.get(_pieces(base, coords))
    values = np.frombuffer(b"".join(bytes(r) for r in raw), dtype=base.dtype)
    return values.reshape(x.shape).copy()


def _input_coordinates(view, shape) -> list[np.ndarray]:
    """Per input axis, the coordinate of every view element (C order)."""
    index = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), np.int64)
    n = index.shape[1]
    coords = [np.full(n, s, dtype=np.int64) for s in view.start]
    for k, a in enumerate(view.axes):
        if a is not None:
            coords[a] = view.start[a] + view.step[a] * index[k]
    return coords


def _pieces(base, coords) -> list[tuple[int, int, int]]:
    """(chunk, byte offset, length) of each run of the elements of ``base`` at ``coords``
    that are next to each other in one chunk, in the order of ``coords``."""
    grid = base.numblocks
    blocks, inner, sizes = [], [], []
    for a, c in enumerate(coords):
        starts = np.concatenate([[0], np.cumsum(base.chunks[a])])
        b = np.searchsorted(starts, c, side="right") - 1
        blocks.append(b)
        inner.append(c - starts[b])
        sizes.append(np.asarray(base.chunks[a], dtype=np.int64)[b])
    chunk = np.ravel_multi_index(blocks, grid)
    offset = np.zeros_like(chunk)
    for a in range(len(coords)):  # C order inside each block, whose shape may differ at edges
        offset = offset * sizes[a] + inner[a]
    item = base.dtype.itemsize
    starts = np.flatnonzero(np.concatenate(
        [[True], (chunk[1:] != chunk[:-1]) | (offset[1:] != offset[:-1] + 1)]))
    ends = np.append(starts[1:], len(chunk))
    return [(int(chunk[s]), int(offset[s]) * item, int(e - s) * item) for s, e in zip(starts, ends)]
