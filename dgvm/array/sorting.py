"""Sorting: ``sort`` and ``argsort`` along any axis, stable, NaN last.

The order. Values are compared through a sort key: floats with every NaN made one quiet
NaN and -0.0 made +0.0, booleans as uint8. On such keys NumPy's and CuPy's sorts (merge
or radix) and the binary searches below agree on one order: ascending, NaN after +inf
(NumPy's convention), -0.0 equal to +0.0. ``descending=True`` is that order reversed, so
NaN come first there, as in ``np.flip(np.sort(x))``; a stable descending sort keeps equal
elements in their original order (the standard's rule). Sorts are always stable
(``stable=False`` is allowed to be stable). Complex values are in NumPy's order:
lexicographic (real part, then imaginary), those with a NaN part after all the others, in
the order none < imaginary NaN < real NaN < both; the sorts take one stable pass per key
(imaginary, real, NaN class), the searches compare the three keys.

One block along the axis: each chunk sorts its lines where it lives (one blockwise op).

Several blocks: an exact distributed merge, and the result keeps the input's chunks.
1. Every chunk sorts its lines locally into a temporary array (argsort also keeps each
   element's global index along the axis, in a second one).
2. Splits: output block j holds the elements of global rank ``[r_j, r_j+1)`` of every
   line, and ``c[b]`` (per line and boundary r) counts those of input block b among the
   first r. They are found exactly, in a few rounds of ``collect``: each block sends pivots
   sampled from its candidate interval of c; every block counts, by binary search of its
   sorted lines, how many of its elements come before each pivot; the caller adds the
   counts into each pivot's exact global rank and narrows every interval to the pivots
   just below and above r. An interval shrinks about ``SAMPLES + 1`` times per round. When
   all of a boundary's intervals are at most ``WINDOW`` wide they are sampled whole and
   the caller pins the split from those values alone (no counting round): blocks of up
   to ``WINDOW`` elements per line need a single ``collect``. Ties between blocks go to
   the earlier block, ties within one to the earlier position: the original order, so
   the sort is stable.
3. Every output chunk reads from each input block exactly the sorted run it takes (only
   its own elements move) and merges the runs with one stable sort.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array.darray import DArray

SAMPLES = 128  # most pivots a block sends per candidate interval and round
WINDOW = 512  # an interval at most this wide is sampled whole (fewer for many lines)
BUDGET = 2**21  # candidate positions the caller builds per cross block and round
_NONE = np.iinfo(np.int64).max  # "no position"


# -- the order, on the workers' array module ---------------------------------------------

def sort_key(a, xp):
    """``a`` as keys that every backend sorts in one order (see the module notes)."""
    if a.dtype.kind == "f":
        return xp.where(xp.isnan(a), xp.asarray(np.nan, dtype=a.dtype), a + a.dtype.type(0))
    if a.dtype.kind == "c":
        return a + a.dtype.type(0)  # -0.0 parts made +0.0; NaN parts are keyed apart
    if a.dtype.kind == "b":
        return a.astype(np.uint8)
    return a


def _complex_keys(k, xp):
    """A complex key's three real keys, least significant first: the imaginary part, the
    real part, and which parts are NaN (0 none, 1 imaginary, 2 real, 3 both)."""
    re, im = sort_key(xp.real(k), xp), sort_key(xp.imag(k), xp)
    nan_class = xp.isnan(re).astype(np.uint8) * np.uint8(2) + xp.isnan(im).astype(np.uint8)
    return im, re, nan_class


def _stable_argsort(k, xp):
    # NumPy's own stable sort has this order for complex keys (NaN parts last, by class);
    # other backends sort them one real key at a time.
    if k.dtype.kind == "c" and xp is not np:
        order = None
        for part in _complex_keys(k, xp):  # stable passes, the most significant last
            if order is not None:
                part = xp.take_along_axis(part, order, axis=-1)
            step = _stable_argsort(part, xp)
            order = step if order is None else xp.take_along_axis(order, step, axis=-1)
        return order
    if xp is np:
        return np.argsort(k, axis=-1, kind="stable")
    return xp.argsort(k, axis=-1)  # CuPy's sorts are always stable and take no ``kind``


def argsort_lines(k, descending: bool, xp):
    """Stable argsort of keys along the last axis; descending keeps ties in order."""
    if descending:
        n = k.shape[-1]
        return (n - 1) - xp.flip(_stable_argsort(xp.flip(k, axis=-1), xp), axis=-1)
    return _stable_argsort(k, xp)


def _before(a, q, descending: bool, xp):
    """Elementwise: key ``a`` comes strictly before key ``q`` in the order."""
    if descending:
        a, q = q, a
    if a.dtype.kind == "c" or q.dtype.kind == "c":
        return _complex_before(a, q, xp)
    out = a < q
    if a.dtype.kind == "f" or q.dtype.kind == "f":
        out = out | (xp.isnan(q) & ~xp.isnan(a))
    return out


def _complex_before(a, q, xp):
    return _keys_before(_complex_keys(a, xp), _complex_keys(q, xp), xp)


def _keys_before(a, q, xp):
    """``_complex_before`` on the keys ``_complex_keys`` made."""
    ai, ar, ac = a
    qi, qr, qc = q

    def level(x, y):  # NaN parts are level: the NaN class has told them apart
        return (x == y) | (xp.isnan(x) & xp.isnan(y))

    return (ac < qc) | ((ac == qc) & (_before(ar, qr, False, xp)
                                      | (level(ar, qr) & _before(ai, qi, False, xp))))


def count_before(lines, queries, inclusive, descending: bool, xp):
    """Per row: how many keys of ``lines`` (m, n), sorted in the order, come before each
    of ``queries`` (m, k) (or before or level with it, where ``inclusive``: a bool, or
    bools broadcasting to the queries): a binary search, vectorized over rows and
    queries (NumPy's searchsorted is one row at a time), the same on every backend."""
    m, n = lines.shape
    flat = lines.reshape(-1)
    # Complex keys compare as their three real keys: made once here, not at every step.
    complex_ = lines.dtype.kind == "c" or queries.dtype.kind == "c"
    keys = _complex_keys(flat, xp) if complex_ else (flat,)
    q = _complex_keys(queries, xp) if complex_ else queries

    def before(x, y):
        if complex_:
            return _keys_before(*((y, x) if descending else (x, y)), xp)
        return _before(x, y, descending, xp)

    rows = (xp.arange(m, dtype=np.int64) * n).reshape(m, 1)
    lo = xp.zeros(queries.shape, dtype=np.int64)
    hi = xp.full(queries.shape, n, dtype=np.int64)
    for _ in range(int(n).bit_length()):
        mid = (lo + hi) // 2
        at = rows + xp.minimum(mid, n - 1)
        a = tuple(xp.take(k, at) for k in keys) if complex_ else xp.take(flat, at)
        if inclusive is True or inclusive is False:
            go = ~before(q, a) if inclusive else before(a, q)
        else:
            go = xp.where(inclusive, ~before(q, a), before(a, q))
        go = go & (lo < hi)
        lo = xp.where(go, mid + 1, lo)
        hi = xp.where(go, hi, mid)
    return lo


def to_lines(a, axis: int, xp):
    """(m, n): the 1-d lines of ``a`` along ``axis``, in C order of the other axes."""
    return xp.moveaxis(a, axis, -1).reshape(-1, a.shape[axis])


def from_lines(v, axis: int, shape, xp):
    """Inverse of ``to_lines`` for a block of ``shape`` (``v.shape[1]`` along ``axis``)."""
    rest = tuple(s for i, s in enumerate(shape) if i != axis)
    return xp.moveaxis(v.reshape(rest + (v.shape[1],)), -1, axis)


def block_of(starts, lo) -> tuple[int, ...]:
    """Block index of the chunk whose first element is ``lo``."""
    return tuple(int(np.searchsorted(s, l, side="right")) - 1 for s, l in zip(starts, lo))


def _starts(chunks) -> list[np.ndarray]:
    return [np.concatenate([[0], np.cumsum(c)]).astype(np.int64) for c in chunks]


# -- checks ------------------------------------------------------------------------------

def check_array(x, name: str) -> None:
    if not isinstance(x, DArray):
        raise TypeError(f"dgvm.array.{name} expects a DArray, got {type(x).__name__}")


def _axis(axis, x: DArray, name: str) -> int:
    if x.ndim == 0:
        raise ValueError(f"dgvm.array.{name} needs an array of at least one dimension, got a 0-d array")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"dgvm.array.{name}: axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise np.exceptions.AxisError(
            f"dgvm.array.{name}: axis {axis} is out of bounds for an array of {x.ndim} dimensions"
        )
    return int(axis) % x.ndim


# -- blockwise ops -------------------------------------------------------------------------

@dataclass
class _LocalSort:
    """Each chunk's lines sorted: the values, or the global indices along the axis."""

    axis: int
    descending: bool
    indices: bool

    def block(self, read, lo, hi, xp):
        x = read(0, lo, hi)
        lines = to_lines(x, self.axis, xp)
        order = argsort_lines(sort_key(lines, xp), self.descending, xp)
        out = order + lo[self.axis] if self.indices else xp.take_along_axis(lines, order, axis=1)
        return from_lines(out, self.axis, x.shape, xp)


@dataclass
class _TakeLocal:
    """Values of input 0 at the chunk-local order of input 1 (global indices)."""

    axis: int

    def block(self, read, lo, hi, xp):
        x = read(0, lo, hi)
        order = to_lines(read(1, lo, hi), self.axis, xp) - lo[self.axis]
        return from_lines(xp.take_along_axis(to_lines(x, self.axis, xp), order, axis=1),
                          self.axis, x.shape, xp)


@dataclass
class _Pick:
    """Partial: values of a chunk's sorted lines at the positions asked of its block."""

    axis: int
    starts: list
    positions: dict  # cross block -> (m, B, Q) positions, _NONE for none

    def partial(self, chunk, lo, hi, xp):
        block = block_of(self.starts, lo)
        pos = self.positions.get(_cross(block, self.axis))
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
        pivots = self.pivots.get(_cross(block, self.axis))
        if pivots is None:
            return None
        m, nb, q = pivots.shape
        lines = sort_key(to_lines(chunk, self.axis, xp), xp)
        later = xp.asarray(np.repeat(np.arange(nb) > block[self.axis], q)[None, :])
        return count_before(lines, sort_key(xp.asarray(pivots.reshape(m, nb * q)), xp),
                            later, self.descending, xp)


@dataclass
class _Merge:
    """Output chunk j of a multi-block sort: the runs ``[c_j[b], c_j+1[b])`` of every
    input block's sorted lines, merged."""

    axis: int
    descending: bool
    indices: bool
    starts: list
    splits: dict  # cross block -> (m, B + 1, B)

    def block(self, read, lo, hi, xp):
        ax = self.axis
        block = block_of(self.starts, lo)
        c = self.splits[_cross(block, ax)]
        j = block[ax]
        first, last = c[:, j, :], c[:, j + 1, :]
        values, index, keep = [], [], []
        for b in range(c.shape[2]):
            p0, p1 = int(first[:, b].min()), int(last[:, b].max())
            if p1 <= p0:
                continue
            rlo, rhi = list(lo), list(hi)
            rlo[ax], rhi[ax] = int(self.starts[ax][b]) + p0, int(self.starts[ax][b]) + p1
            values.append(to_lines(read(0, rlo, rhi), ax, xp))
            if self.indices:
                index.append(to_lines(read(1, rlo, rhi), ax, xp))
            pos = np.arange(p0, p1)
            keep.append((pos >= first[:, b:b + 1]) & (pos < last[:, b:b + 1]))
        v = xp.concatenate(values, axis=1)
        order = argsort_lines(sort_key(v, xp), self.descending, xp)
        keep = np.concatenate(keep, axis=1)
        if not keep.all():  # lines take runs of different lengths: the taken ones first
            kept = xp.take_along_axis(xp.asarray(keep), order, axis=1)
            order = xp.take_along_axis(order, _stable_argsort((~kept).astype(np.uint8), xp), axis=1)
        order = order[:, : hi[ax] - lo[ax]]
        src = xp.concatenate(index, axis=1) if self.indices else v
        return from_lines(xp.take_along_axis(src, order, axis=1), ax,
                          [h - l for l, h in zip(lo, hi)], xp)


def _cross(block: tuple, axis: int) -> tuple:
    return block[:axis] + block[axis + 1:]


def _full(cross: tuple, b: int, axis: int) -> tuple:
    return cross[:axis] + (b,) + cross[axis:]


# -- the splits, on the caller ---------------------------------------------------------------

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
    last = _stable_argsort(~np.take_along_axis(ok, order, axis=1), np)  # unused slots last
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


def splits(s: DArray, axis: int, descending: bool) -> dict:
    """Per cross block (the block indices off ``axis``): c of shape (m, B + 1, B), where
    output block j of every line takes positions ``[c[j, b], c[j + 1, b])`` of input block
    b's locally sorted line. ``s`` holds the locally sorted lines."""
    sizes = np.asarray(s.chunks[axis], dtype=np.int64)
    nb = len(sizes)
    bounds = np.cumsum(sizes)[:-1]
    other = [a for a in range(s.ndim) if a != axis]
    starts = _starts(s.chunks)
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


# -- the functions -------------------------------------------------------------------------

def _sorted(x: DArray, axis: int, descending: bool, indices: bool, name: str) -> DArray:
    from dgvm.array.creation import empty

    client = x.alloc.client
    dtype = np.dtype(np.int64) if indices else x.dtype
    if x.numblocks[axis] == 1:
        out = empty(x.shape, dtype, x.chunks, colocate=x, client=client)
        blockwise.run(_LocalSort(axis, descending, indices), out, [x], name)
        return out
    s = empty(x.shape, x.dtype, x.chunks, colocate=x, client=client)
    if indices:
        i = empty(x.shape, np.int64, x.chunks, colocate=x, client=client)
        blockwise.run(_LocalSort(axis, descending, True), i, [x], f"{name}-local")
        blockwise.run(_TakeLocal(axis), s, [x, i], f"{name}-local-values")
        inputs = [s, i]
    else:
        blockwise.run(_LocalSort(axis, descending, False), s, [x], f"{name}-local")
        inputs = [s]
    c = splits(s, axis, descending)
    # Made once the splits are known: a failure before leaves no result allocated.
    out = empty(x.shape, dtype, x.chunks, colocate=x, client=client)
    blockwise.run(_Merge(axis, descending, indices, _starts(x.chunks), c), out, inputs, name)
    return out  # the temporaries free themselves once the merge has read them


def sort(x, /, *, axis=-1, descending=False, stable=True) -> DArray:
    """A sorted copy of ``x`` along ``axis`` (same shape and chunks); stable, NaN last
    (first when ``descending``)."""
    check_array(x, "sort")
    return _sorted(x, _axis(axis, x, "sort"), bool(descending), False, "sort")


def argsort(x, /, *, axis=-1, descending=False, stable=True) -> DArray:
    """The int64 indices along ``axis`` that sort ``x`` (stable: ties keep their order,
    also when ``descending``)."""
    check_array(x, "argsort")
    return _sorted(x, _axis(axis, x, "argsort"), bool(descending), True, "argsort")
