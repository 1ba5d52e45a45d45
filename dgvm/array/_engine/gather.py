"""Gathers: a result whose every axis is a coordinate map of the input's (``Take``).

Flips, rolls, repeats, tiles, ``take`` and integer-array indexing are one blockwise op:
output coordinate j on axis a is input coordinate ``maps[a][j]``. Each output chunk is
cut where the source block changes (``placement.gathered_chunks``) and placed beside the
input chunk that holds its first element, so it mostly reads one local chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.placement import gathered_chunks, result_like


@dataclass
class Take:
    """Output coordinate j on axis a is input coordinate ``maps[a][j]`` (None: j itself).
    The block reads the bounding region of the coordinates it needs, then picks them."""

    maps: tuple

    def block(self, read, lo, hi, xp):
        rlo, rhi, picks = [], [], []
        for a, m in enumerate(self.maps):
            idx = np.arange(lo[a], hi[a]) if m is None else m[lo[a]:hi[a]]
            i0, i1 = int(idx.min()), int(idx.max()) + 1
            rlo.append(i0)
            rhi.append(i1)
            picks.append(_pick(idx, i0, i1, xp))
        region = read(0, rlo, rhi)
        for a, p in enumerate(picks):
            if isinstance(p, slice):
                region = region[(slice(None),) * a + (p,)]
            elif p is not None:
                region = xp.take(region, p, axis=a)
        return region


def _pick(idx: np.ndarray, i0: int, i1: int, xp):
    """How to pick coordinates ``idx`` from a region starting at ``i0``: None (all of it),
    a slice (evenly spaced: a view), or an index array."""
    n = len(idx)
    step = int(idx[1] - idx[0]) if n > 1 else 1
    if step != 0 and (n == 1 or (np.diff(idx) == step).all()):
        if step == 1 and n == i1 - i0:
            return None
        start = int(idx[0]) - i0
        stop = start + step * n
        return slice(start, stop if stop >= 0 else None, step)
    return xp.asarray(idx - i0)


def take_along_maps(x, maps: list, name: str):
    """``x`` gathered by per-axis coordinate maps (None: the axis as it is)."""
    maps = [None if m is None else np.asarray(m, dtype=np.int64) for m in maps]
    for a, m in enumerate(maps):
        if m is not None and len(m) and (m.min() < 0 or m.max() >= x.shape[a]):
            raise IndexError(f"index out of bounds for axis {a} of length {x.shape[a]}")
    shape = tuple(x.shape[a] if m is None else len(m) for a, m in enumerate(maps))
    if 0 in shape:  # nothing to gather: held on the caller (zero_size)
        return type(x).empty_on_caller(shape, x.dtype, x.client)
    chunks = tuple(x.chunks[a] if m is None else gathered_chunks(x, a, m) for a, m in enumerate(maps))

    def first_in(lo):
        return [l if m is None else int(m[l]) for l, m in zip(lo, maps)]

    out = result_like(x, shape, x.dtype, chunks, first_in)
    blockwise.run(Take(tuple(maps)), out, [x], name)
    return out
