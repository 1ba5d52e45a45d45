"""Philox4x32-10 (Random123; Salmon et al., SC'11) and the blockwise op of one draw.

The generator of ``dgvm.array.random`` (its module docstring says how values follow
from a seed, a call number and an element's flat index). ``Draw`` computes one call's
values for a chunk with uint64 arithmetic that NumPy and CuPy do bit for bit alike, on
the worker that holds it (or on the caller, for a scalar). Its temporaries take about
``WORK_PER_ELEMENT`` bytes per value (the counter words, Philox's products, the floats
after), many times a chunk: a chunk is drawn a slice at a time, each within the worker's
working-memory budget (``dgvm.backends.working_memory``). Every value is a function of its
flat index, so the slices give the numbers the whole chunk would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dgvm.backends import working_memory

# Bytes of temporaries per value at the peak of ``Draw.values`` (measured with NumPy and
# tracemalloc: 104 for floats, 120 for integers), with a margin.
WORK_PER_ELEMENT = 160

_M32 = 0xFFFFFFFF
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox4x32(counter, key, xp):
    """Philox4x32-10 of four uint64 arrays holding 32-bit counter words and a key of two
    32-bit ints: four uint64 arrays of 32-bit output words."""
    c0, c1, c2, c3 = counter
    k0, k1 = int(key[0]), int(key[1])
    m0, m1, mask = xp.uint64(_PHILOX_M[0]), xp.uint64(_PHILOX_M[1]), xp.uint64(_M32)
    s32 = xp.uint64(32)
    for r in range(10):
        if r:
            k0, k1 = (k0 + _PHILOX_W[0]) & _M32, (k1 + _PHILOX_W[1]) & _M32
        p0, p1 = c0 * m0, c2 * m1
        c0, c1, c2, c3 = ((p1 >> s32) ^ c1 ^ xp.uint64(k0), p1 & mask,
                          (p0 >> s32) ^ c3 ^ xp.uint64(k1), p0 & mask)
    return c0, c1, c2, c3


def _mulhi(a, b: int, xp):
    """High 64 bits of ``a * b`` (uint64 array times an int below 2**64), exactly."""
    mask, s32 = xp.uint64(_M32), xp.uint64(32)
    a_lo, a_hi = a & mask, a >> s32
    b_lo, b_hi = xp.uint64(b & _M32), xp.uint64(b >> 32)
    ll, lh, hl = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo
    mid = (ll >> s32) + (lh & mask) + (hl & mask)
    return a_hi * b_hi + (lh >> s32) + (hl >> s32) + (mid >> s32)


@dataclass
class Draw:
    """Blockwise op (also run on the caller for a scalar): one call's values."""

    kind: str  # "random", "uniform", "normal", "integers"
    key: tuple
    call: int
    shape: tuple
    dtype: str
    params: tuple = ()

    def block(self, read, lo, hi, xp):
        out = xp.empty(tuple(h - l for l, h in zip(lo, hi)), dtype=np.dtype(self.dtype))
        self.block_into(read, lo, hi, xp, out)
        return out

    def block_into(self, read, lo, hi, xp, target, limit: int | None = None) -> bool:
        """The chunk's values written into ``target`` a slice at a time, each slice's
        temporaries within ``limit`` bytes (default: the working-memory budget). The output
        of a draw is a new array: a failure halfway leaves nothing anyone saw."""
        for slo, shi in working_memory.slices(target.shape, WORK_PER_ELEMENT, limit):
            sl = tuple(slice(a, b) for a, b in zip(slo, shi))
            target[sl] = self.values([l + a for l, a in zip(lo, slo)], [l + b for l, b in zip(lo, shi)], xp)
        return True

    def values(self, lo, hi, xp):
        idx = xp.zeros(tuple(h - l for l, h in zip(lo, hi)), dtype=np.uint64)
        for a in range(len(lo)):
            stride = xp.uint64(math.prod(self.shape[a + 1:]))
            along = xp.arange(lo[a], hi[a], dtype=np.uint64) * stride
            idx = idx + along.reshape((-1,) + (1,) * (len(lo) - a - 1))
        mask, s32 = xp.uint64(_M32), xp.uint64(32)
        # The call's counter words are the same for every element: scalars, broadcast.
        counter = [idx & mask, idx >> s32, xp.uint64(self.call & _M32), xp.uint64(self.call >> 32)]
        del idx
        w = philox4x32(counter, self.key, xp)
        del counter
        hi64, lo64 = (w[0] << s32) | w[1], (w[2] << s32) | w[3]
        dtype = np.dtype(self.dtype)
        if self.kind == "integers":
            low, span = self.params
            off = hi64 if span == 2**64 else _mulhi(hi64, span, xp)
            v = off + xp.uint64(low % 2**64)  # modulo 2**64: negative lows wrap back
            return (v.astype(np.int64) if dtype.kind == "i" else v).astype(dtype)
        u = (hi64 >> xp.uint64(11)).astype(np.float64) * 2.0**-53
        if self.kind == "random":
            if dtype == np.float32:
                return (hi64 >> xp.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
            return u
        if self.kind == "uniform":
            low, high = self.params
            return low + (high - low) * u
        loc, scale = self.params  # normal
        v = (lo64 >> xp.uint64(11)).astype(np.float64) * 2.0**-53
        return loc + scale * (xp.sqrt(-2.0 * xp.log1p(-u)) * xp.cos(2.0 * np.pi * v))
