"""Reading a few elements without computing anything on the workers: ``x[i, j]``,
``x[3] > 0``.

A NumPy program reads single elements all the time (``float(x[i, j])``, ``if x[k] > 0``,
loops over ``x[k]``). Such a read is a deferred view (``views``), or a small
elementwise tree over views; computing it would allocate a result, run a task per
worker and read it back, three round trips for eight bytes. A deferred array of at most
``MAX_ELEMENTS`` elements whose leaves are views of (or whole) computed arrays is instead
read on the caller: each leaf straight from the chunks of its array, each run of
elements that follow one another in one chunk a (chunk, byte offset, length) piece of
one read request per worker and array (``AllocationHandle.get``; ``x[3] - x[2]`` reads x
once), and the tree evaluated with NumPy, as the elementwise operations of host values
are (``deferred``).
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine.deferred import view_shape
from dgvm.array._engine.trees import evaluate
from dgvm.client.dispatch import wait_raising

MAX_ELEMENTS = 4096


def read_view(x) -> np.ndarray | None:
    """The values of ``x`` if it is a small deferred array over computed arrays, else None."""
    d = x.deferred
    if d is None or d.host is not None or not d.inputs or x.size > MAX_ELEMENTS:
        return None
    # Every leaf a computed array of at least one axis (a leaf is never larger than the
    # result it broadcasts into), checked before anything is read.
    if any(b.ndim == 0 or not b.is_stored for b in d.inputs):
        return None
    wait_raising([f for b in d.inputs for f in b.pending.writes])  # values as of the views
    leaves = _read(d.inputs, d.views)
    with np.errstate(all="ignore"):
        value = evaluate(d.expr, leaves, np)
    return np.array(np.broadcast_to(value, x.shape), dtype=x.dtype)


def _read(bases, views) -> list[np.ndarray]:
    """Each leaf ``bases[i]`` through ``views[i]`` (None: whole), read from its chunks:
    one ``AllocationHandle.get`` per array, however many leaves view it."""
    shapes = [view_shape(b, v) for b, v in zip(bases, views)]
    pieces = [_pieces(b, _input_coordinates(v, s)) for b, v, s in zip(bases, views, shapes)]
    by_array: dict[int, list[int]] = {}
    for i, b in enumerate(bases):
        by_array.setdefault(id(b.alloc), []).append(i)
    leaves = [None] * len(bases)
    for leaf_ids in by_array.values():
        raw = bases[leaf_ids[0]].alloc.get([p for i in leaf_ids for p in pieces[i]])
        for i in leaf_ids:  # the answers in the order of the pieces
            mine, raw = raw[:len(pieces[i])], raw[len(pieces[i]):]
            leaves[i] = np.concatenate(mine).view(bases[i].dtype).reshape(shapes[i])
    return leaves


def _input_coordinates(view, shape) -> list[np.ndarray]:
    """Per input axis, the coordinate of every view element (C order); ``view`` None:
    the input itself, of ``shape``."""
    index = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), np.int64)
    if view is None:
        return list(index)
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
