"""Where the chunks of a result go: beside the input chunks they are made from.

An operation's output chunk is placed on the worker that holds the input chunk its first
element comes from (``colocate=(source, picks)``: chunk k goes to the home of source chunk
``picks[k]``), so a transpose, a slice or a gather mostly reads local chunks, and a task
writes where it runs. The arrays here are read (shape, chunks, allocation), never made,
but for ``result_like``, which asks the class of the array it is given.
"""

from __future__ import annotations

import numpy as np

from dgvm.protocol import chunk_grid


def picks_near(source, chunks, first_in) -> list[int]:
    """Per chunk of a result cut into ``chunks``: the chunk of ``source`` holding the
    input element ``first_in(lo)`` that the result chunk's first element ``lo`` maps to."""
    starts = [np.cumsum((0,) + c) for c in source.chunks]
    return [chunk_at(source.numblocks, starts, first_in([s.start for s in sl]))
            for sl in chunk_grid.block_slices(chunks)]


def chunk_at(grid, starts, coords) -> int:
    """Chunk index that holds the element at global ``coords`` (-1: outside the array)."""
    block = []
    for st, c in zip(starts, coords):
        if not 0 <= c < st[-1]:
            return -1
        block.append(int(np.searchsorted(st, c, side="right")) - 1)
    return chunk_grid.flat_index(block, grid)


def result_like(like, shape, dtype, chunks, first_in=None):
    """An operation's result array, of ``like``'s class, whose chunk i is placed near the
    chunk of ``like`` that holds the input element ``first_in(lo_i)`` maps to (None: where
    the GVAT puts it). Not zero-filled: the operation's task writes every element
    (``blockwise.run`` stores whole blocks), so a pass of memory writes is saved, and a
    placed result may take over a released one's allocation (``recycle``). An operation
    that fails part way leaves old values in the chunks it did not reach; its result is
    never returned."""
    colocate = None if first_in is None else (like, picks_near(like, chunks, first_in))
    return type(like).allocated(shape, dtype, chunks, colocate=colocate, zero=False)


def range_within(r: range, lo: int, hi: int) -> tuple[int, int]:
    """The places ``[i, j)`` in ``r`` of its coordinates within ``[lo, hi)`` (they are
    consecutive: a range is monotonic); ``i == j`` where there are none. Arithmetic, not a
    scan: a slice of a long axis is a range of millions of coordinates."""
    n = len(r)
    fwd = r if r.step > 0 else r[::-1]
    if not n or hi <= fwd.start or lo > fwd[-1]:
        return 0, 0
    i = max(0, -(-(lo - fwd.start) // fwd.step))  # the first place at or past lo
    j = min(n, -(-(hi - fwd.start) // fwd.step))
    if i >= j:
        return 0, 0
    return (i, j) if r.step > 0 else (n - j, n - i)


def range_blocks(chunks: tuple, r: range) -> list[tuple[int, int]]:
    """(block, how many of ``r``'s coordinates fall in it) along an axis cut into
    ``chunks``, in the order ``r`` visits the blocks (``range_within`` per block)."""
    out, lo = [], 0
    for b, size in enumerate(chunks):
        i, j = range_within(r, lo, lo + size)
        if i < j:
            out.append((b, j - i))
        lo += size
    return out if r.step > 0 else out[::-1]


def gathered_chunks(x, a: int, m) -> tuple:
    """Chunks along axis ``a`` of ``x`` gathered by the coordinates ``m`` (an array, or a
    range): cut where the source block changes, so that most output chunks read one input
    chunk; never larger than the input's largest."""
    if isinstance(m, range):
        runs = [count for _, count in range_blocks(x.chunks[a], m)]
    else:
        st = np.cumsum((0,) + x.chunks[a])
        src_block = np.searchsorted(st, m, side="right") - 1
        edges = [0, *(np.flatnonzero(np.diff(src_block)) + 1).tolist(), len(m)]
        runs = [e - s for s, e in zip(edges[:-1], edges[1:])]
    limit = max(x.chunks[a])
    out = []
    for run in runs or [0]:
        while run > limit:
            out.append(limit)
            run -= limit
        out.append(run)
    return tuple(out)


def chunk_homes(where) -> list[str] | None:
    """The home of each chunk of a result placed by ``where`` (a ``colocate=`` value): an
    array of the same chunks, or ``(source, picks)`` (chunk k goes to the home of source
    chunk picks[k]); None for the other forms (an allocation id, a buffer)."""
    source, picks = where if isinstance(where, tuple) else (where, None)
    alloc = getattr(source, "alloc", None)
    if alloc is None:
        return None
    homes = alloc.homes()
    return homes if picks is None else [homes[int(p)] for p in picks]


def homes_of(where) -> dict[str, list[int]]:
    """Worker -> chunk indices of a result placed by ``where`` (an array, or
    ``(source, picks)``)."""
    if not isinstance(where, tuple):
        return where.alloc.by_home()  # grouped once per chunk map
    out: dict[str, list[int]] = {}
    for k, w in enumerate(chunk_homes(where)):
        out.setdefault(w, []).append(k)
    return out
