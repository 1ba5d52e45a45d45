"""The ops of assignments (``x[key] = value``), run on the chunks of ``x`` in place.

``Assign`` writes the positions a key selects from a scalar or an array broadcast over
the selection; ``MaskAssign`` writes a scalar where a mask is true. ``setitem`` and
``view_writes`` (writes through views) make them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Assign:
    """For a chunk of ``x``: the positions the key selects in it, set from the value (a
    scalar, or input 1 broadcast over the selection's shape)."""

    maps: tuple  # per axis of x: coordinate list of the selection (None: whole axis)
    sel_shape: tuple  # shape of the selection (ints dropped), the value broadcasts to it
    keep: tuple  # axes of x that are axes of the selection
    value: object
    value_shape: tuple | None

    def block_into(self, read, lo, hi, xp, target) -> bool:
        self._assign(read, lo, hi, xp, target)  # only the selected positions are written
        return True

    def block(self, read, lo, hi, xp):  # the chunk's home moved: assign into a copy
        out = read(0, lo, hi).copy()
        self._assign(read, lo, hi, xp, out)
        return out

    def _assign(self, read, lo, hi, xp, dst) -> None:
        local, sel = [], []
        for a, m in enumerate(self.maps):
            if m is None:
                local.append(np.arange(hi[a] - lo[a]))
                sel.append(np.arange(lo[a], hi[a]))
                continue
            j = np.flatnonzero((m >= lo[a]) & (m < hi[a]))
            if not len(j):
                return  # the key selects nothing in this chunk
            local.append(m[j] - lo[a])
            sel.append(j)
        if self.value_shape is None:
            value = self.value
        else:
            vsh = self.value_shape
            d = len(self.sel_shape) - len(vsh)
            coords = [sel[self.keep[i + d]] for i in range(len(vsh))]
            vlo = [0 if n == 1 else int(c.min()) for n, c in zip(vsh, coords)]
            vhi = [1 if n == 1 else int(c.max()) + 1 for n, c in zip(vsh, coords)]
            region = read(1, vlo, vhi)
            picks = [np.zeros(1, np.int64) if n == 1 else c - l for n, c, l in zip(vsh, coords, vlo)]
            value = region[xp.ix_(*(xp.asarray(p) for p in picks))] if picks else region
            value = xp.broadcast_to(value, [len(sel[a]) for a in self.keep])
            value = value.reshape([len(v) for v in local])
        dst[xp.ix_(*(xp.asarray(v) for v in local))] = value


@dataclass
class MaskAssign:
    value: object

    def block_into(self, read, lo, hi, xp, target) -> bool:
        target[read(1, lo, hi)] = self.value
        return True

    def block(self, read, lo, hi, xp):  # the chunk's home moved: a new array
        return xp.where(read(1, lo, hi), self.value, read(0, lo, hi))
