"""The splits of a sort along an axis of several blocks: an exact distributed merge.

1. Every chunk sorts its lines locally into a temporary array (argsort also keeps each
   element's global index along the axis, in a second one) (``sort_ops``).
2. Splits (here): output block j holds the elements of global rank ``[r_j, r_j+1)`` of
   every line, and ``c[b]`` (per line and boundary r) counts those of input block b among
   the first r. They are found exactly, in a few rounds of ``collect``: each block sends
   pivots sampled from its candidate interval of c; every block counts, by binary search
   of its sorted lines, how many of its elements come before each pivot; the caller adds
   the counts into each pivot's exact global rank and narrows every interval to the
   pivots just below and above r. An interval shrinks about ``SAMPLES + 1`` times per
   round. When all of a boundary's intervals are at most ``WINDOW`` wide they are sampled
   whole and the caller pins the split from those values alone (no counting round):
   blocks of up to ``WINDOW`` elements per line need a single ``collect``. Ties between
   blocks go to the earlier block, ties within one to the earlier position: the original
   order, so the sort is stable.
3. Every output chunk reads from each input block exactly the sorted run it takes (only
   its own elements move) and merges the runs with one stable sort (``sort_ops.Merge``).

The order is ``sort_keys``'.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.sort_keys import (
    argsort_lines, block_of, block_starts, count_before, cross_of, sort_key, stable_argsort, to_lines,
)

SAMPLES = 128  # most pivots a block sends per candidate interval and round
WINDOW = 512  # an interval at most this wide is sampled whole (fewer for many lines)
BUDGET = 2**21  # candidate positions the caller builds per cross block and round
_NONE = np.iinfo(np.int64).max  # "no position"


@dataclass
class _Pick:
    """Partial: values of a chunk's sorted lines at the positions asked of its block."""

    axis: int
    starts: list
    positions: dict  # cross block -> (m, B, Q) positions, _NONE for none

    def partial(self, chunk, lo, hi, xp):
        block = block_of(self.starts, lo)
        pos = self.positions.get(cross_of(block, self.axis))
        if pos is None:
            return None
        lines = to_lines(chunk, self.axis, xp)
        idx = np.minimum(pos[:, block[self.axis], :], lines.shape[1] - 1)
        return xp.take_along_axis(lines, xp.asarray(idx), axis=1)


@dataclass
class _Count:
    """Partial: per pivot, how many elements of the chunk's lines come before it in the
    global order: those level with it too when the pivot is from a later block."""

    axis: int
    starts: list
    descending: bool
    pivots: dict  # cross block -> (m, B, Q) pivot values, by the block they come from

    def partial(self, chunk, lo, hi, xp):
        block = block_of(self.starts, lo)
        pivots = self.pivots.get(cross_of(block, self.axis))
        if pivots is None:
            return None
        m, nb, q = pivots.shape
        lines = sort_key(to_lines(chunk, self.axis, xp), xp)
        later = xp.asarray(np.repeat(np.arange(nb) > block[self.axis], q)[None, :])
        return count_before(lines, sort_key(xp.asarray(pivots.reshape(m, nb * q)), xp),
                            later, self.descending, xp)


def _full(cross: tuple, b: int, axis: int) -> tuple:
    return cross[:axis] + (b,) + cross[axis:]


def _candidates(lo, hi) -> np.ndarray:
    """Positions to sample per (line, block) for intervals ``[lo, hi)`` of shape
    (m, R, B): the union over the R boundaries, as (m, B, Q) with _NONE padding."""
    m, r, nb = lo.shape
    room = BUDGET // max(1, lo.size)
    samples = min(SAMPLES, max(8, room))
    window = min(WINDOW, max(samples, room))
    width = hi - lo
    i = np.arange(window)
    whole = width <= window
    spaced = lo[..., None] + ((i[:samples] + 1) * width[..., None]) // (samples + 1)
    spaced = np.concatenate(
        [spaced, np.zeros(spaced.shape[:-1] + (window - samples,), np.int64)], axis=-1)
    pos = np.where(whole[..., None], lo[..., None] + i, spaced)
    ok = np.where(whole[..., None], i < width[..., None], i < samples) & (width > 0)[..., None]
    pos = np.where(ok, pos, _NONE).transpose(0, 2, 1, 3).reshape(m, nb, -1)
    pos.sort(axis=-1)
    dup = np.zeros(pos.shape, bool)
    dup[..., 1:] = pos[..., 1:] == pos[..., :-1]
    pos[dup] = _NONE
    pos.sort(axis=-1)
    q = max(1, int((pos != _NONE).sum(axis=-1).max()))
    return pos[..., :q], window


def _resolve(lo, hi, pos, values, window, bounds, descending) -> None:
    """Pin, in place, the splits of the boundaries whose intervals were all sampled whole
    (``pos``/``values``: the picked positions (m, B, Q) and values (m, B * Q)): of the
    elements inside the intervals, the first ``r - sum(lo)`` in the order are taken."""
    m, _, nb = lo.shape
    width = hi - lo
    whole = (width <= window).all(axis=2) & (width > 0).any(axis=2)
    if not whole.any():
        return
    line, bound = np.nonzero(whole)
    first, w = lo[line, bound], width[line, bound]  # (k, B)
    i = np.arange(window)
    ok = i < w[..., None]
    # Where each wanted position was picked: rows (line, block) of ``pos`` are sorted.
    q = pos.shape[2]
    stride = int(pos[pos != _NONE].max(initial=0)) + 2
    keys = (np.arange(m * nb)[:, None] * stride + np.minimum(pos.reshape(m * nb, q), stride - 1)).ravel()
    rows = line[:, None] * nb + np.arange(nb)
    want = rows[..., None] * stride + np.where(ok, first[..., None] + i, 0)
    at = np.minimum(np.searchsorted(keys, want), keys.size - 1)
    if not (keys[at] == want)[ok].all():
        raise RuntimeError("dgvm.array.sort: a window position was not picked (a bug; please report it)")
    v = values.reshape(-1)[at].reshape(len(line), nb * window)
    ok = ok.reshape(len(line), nb * window)
    order = argsort_lines(sort_key(v, np), descending, np)
    last = stable_argsort(~np.take_along_axis(ok, order, axis=1), np)  # unused slots last
    order = np.take_along_axis(order, last, axis=1)
    taken = np.zeros(ok.shape, bool)
    need = bounds[bound] - first.sum(axis=1)
    np.put_along_axis(taken, order, np.arange(ok.shape[1])[None, :] < need[:, None], axis=1)
    pinned = first + taken.reshape(len(line), nb, window).sum(axis=2)
    lo[line, bound] = pinned
    hi[line, bound] = pinned


def _narrow(lo, hi, pos, before, bounds, sizes) -> None:
    """Shrink the intervals ``[lo, hi]`` (m, R, B) of the splits, in place, from the
    pivots at ``pos`` (m, B, Q) and the counts ``before`` (m, B counting, B * Q) of the
    elements of each block that come before each pivot (see ``_Count``)."""
    m, nb, q = pos.shape
    valid = (pos < sizes[None, :, None]).reshape(m, nb * q)
    own = np.repeat(np.arange(nb), q)[None, None, :]  # the block each pivot comes from
    blk = np.arange(nb)[None, :, None]
    before = np.where(blk == own, pos.reshape(m, 1, nb * q), before)
    through = before + (blk == own)
    rank = np.where(valid, before.sum(axis=1), _NONE)  # exact global rank of each pivot
    order = np.argsort(rank, axis=1, kind="stable")
    rank = np.take_along_axis(rank, order, axis=1)
    before = np.take_along_axis(before, order[:, None, :], axis=2)
    through = np.take_along_axis(through, order[:, None, :], axis=2)
    below = (rank[:, None, :] < bounds[None, :, None]).sum(axis=-1)  # (m, R)
    pred = np.maximum(below - 1, 0)[:, None, :]
    succ = np.minimum(below, nb * q - 1)[:, None, :]
    new_lo = np.take_along_axis(through, pred, axis=2).transpose(0, 2, 1)
    new_hi = np.take_along_axis(before, succ, axis=2).transpose(0, 2, 1)
    has_pred = (below > 0)[..., None]
    has_succ = (below < valid.sum(axis=1)[:, None])[..., None]
    np.copyto(lo, np.maximum(lo, new_lo), where=has_pred)
    np.copyto(hi, np.minimum(hi, new_hi), where=has_succ)
    if (lo > hi).any():
        raise RuntimeError(
            "dgvm.array.sort: the blocks' local orders disagree (inconsistent splits); "
            "this is a bug, please report it with the array's dtype and chunks"
        )


def splits(s, axis: int, descending: bool) -> dict:
    """Per cross block (the block indices off ``axis``): c of shape (m, B + 1, B), where
    output block j of every line takes positions ``[c[j, b], c[j + 1, b])`` of input block
    b's locally sorted line. ``s`` holds the locally sorted lines."""
    sizes = np.asarray(s.chunks[axis], dtype=np.int64)
    nb = len(sizes)
    bounds = np.cumsum(sizes)[:-1]
    other = [a for a in range(s.ndim) if a != axis]
    starts = block_starts(s.chunks)
    state = {}
    for cross in itertools.product(*(range(len(s.chunks[a])) for a in other)):
        m = math.prod(s.chunks[a][i] for a, i in zip(other, cross))
        lo = np.zeros((m, nb - 1, nb), np.int64)
        state[cross] = (lo, np.broadcast_to(sizes, lo.shape).copy())
    while True:
        sampled = {c: _candidates(lo, hi) for c, (lo, hi) in state.items() if (lo < hi).any()}
        if not sampled:
            break
        positions = {c: pos for c, (pos, _) in sampled.items()}
        picked = blockwise.collect(_Pick(axis, starts, positions), s, "sort-pivots")
        pivots = {}
        for c, (pos, window) in sampled.items():
            values = np.stack([picked[_full(c, b, axis)] for b in range(nb)], axis=1)
            _resolve(*state[c], pos, values.reshape(pos.shape[0], -1), window, bounds, descending)
            if (state[c][0] < state[c][1]).any():  # some intervals still to narrow
                pivots[c] = values
        if not pivots:
            break
        counted = blockwise.collect(_Count(axis, starts, descending, pivots), s, "sort-ranks")
        for c in pivots:
            before = np.stack([counted[_full(c, b, axis)] for b in range(nb)], axis=1)
            _narrow(*state[c], positions[c], before, bounds, sizes)
    out = {}
    for c, (lo, _) in state.items():
        m = lo.shape[0]
        out[c] = np.concatenate([np.zeros((m, 1, nb), np.int64), lo,
                                 np.broadcast_to(sizes, (m, 1, nb))], axis=1)
    return out
