"""Random numbers made where the chunks live: ``dgvm.array.random``.

The generator is counter based: Philox4x32-10 (Random123; Salmon et al., SC'11), the
one cuRAND and JAX also offer. A ``Generator`` holds a 64-bit key (from ``SeedSequence``
of its seed) and counts its calls. Element i of the result of call n (i: the element's
flat index in C order) takes the 128 bits

    Philox(key, counter=(i mod 2**32, i // 2**32, n mod 2**32, n // 2**32))

so every value is a function of (seed, call number, flat index) only: the same whatever
the chunks, the workers, their number or placement, and ``random((4, 5))`` holds the
same numbers as ``random(20)``. Each chunk is computed on its home worker with uint64
arithmetic that NumPy and CuPy do bit for bit alike (no host round trip on GPUs): the
integers and uniforms agree across backends exactly, normals up to the last bits of
``log``/``cos``. Every call advances the generator, so two calls differ.

From the 128 bits (words ``hi`` and ``lo`` of 64):
- ``random``: ``(hi >> 11) * 2**-53`` (float32: ``(hi >> 40) * 2**-24``), in [0, 1);
- ``uniform``: ``low + (high - low) * random``;
- ``normal``: Box-Muller, ``sqrt(-2 log(1 - u)) * cos(2 pi v)`` with u, v from hi, lo;
- ``integers``: ``low + floor(hi * range / 2**64)`` (Lemire's multiply, no rejection:
  each value's probability is off by less than ``range / 2**64``, under 2**-32 for
  ranges below 2**32).
``size=None`` gives a NumPy scalar (element 0 of the call), computed on the caller.

This is not NumPy's stream: the same seed gives other numbers than ``numpy.random``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import blockwise

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
class _Draw:
    """Blockwise op (also run on the caller for a scalar): one call's values."""

    kind: str  # "random", "uniform", "normal", "integers"
    key: tuple
    call: int
    shape: tuple
    dtype: str
    params: tuple = ()

    def block(self, read, lo, hi, xp):
        return self.values(lo, hi, xp)

    def values(self, lo, hi, xp):
        idx = xp.zeros(tuple(h - l for l, h in zip(lo, hi)), dtype=np.uint64)
        for a in range(len(lo)):
            stride = xp.uint64(math.prod(self.shape[a + 1:]))
            along = xp.arange(lo[a], hi[a], dtype=np.uint64) * stride
            idx = idx + along.reshape((-1,) + (1,) * (len(lo) - a - 1))
        mask, s32 = xp.uint64(_M32), xp.uint64(32)
        ones = xp.ones(idx.shape, dtype=np.uint64)
        w = philox4x32((idx & mask, idx >> s32, ones * xp.uint64(self.call & _M32),
                        ones * xp.uint64(self.call >> 32)), self.key, xp)
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


def _real(v, name: str) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"dgvm.array.random: {name} must be a real number, got {v!r}")
    return float(v)


class Generator:
    """A stream of random arrays (see the module notes): ``default_rng(seed)``."""

    def __init__(self, seed=None):
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        self._key = tuple(int(k) for k in seq.generate_state(2, np.uint32))
        self._calls = 0

    def __repr__(self):
        key = f"{self._key[0]:08x}{self._key[1]:08x}"
        return f"dgvm.array.random.Generator(Philox4x32, key={key}, calls={self._calls})"

    def _draw(self, kind, size, dtype, params, chunks, client):
        from dgvm.array.creation import empty

        op = _Draw(kind, self._key, self._calls, (), np.dtype(dtype).str, params)
        self._calls += 1
        if size is None:
            return op.values([], [], np)[()]
        x = empty(size, dtype, chunks, client=client)
        op.shape = x.shape
        blockwise.run(op, x, [], f"random-{kind}")
        return x

    def random(self, size=None, dtype=np.float64, *, chunks="auto", client=None):
        """Floats uniform in [0, 1) (float64 or float32)."""
        dtype = np.dtype(dtype)
        if dtype not in (np.float64, np.float32):
            raise TypeError(f"dgvm.array.random: random() makes float64 or float32, not {dtype}")
        return self._draw("random", size, dtype, (), chunks, client)

    def uniform(self, low=0.0, high=1.0, size=None, *, chunks="auto", client=None):
        """float64 uniform in [low, high)."""
        params = (_real(low, "low"), _real(high, "high"))
        return self._draw("uniform", size, np.float64, params, chunks, client)

    def normal(self, loc=0.0, scale=1.0, size=None, *, chunks="auto", client=None):
        """float64 normal with mean ``loc`` and standard deviation ``scale`` (>= 0)."""
        params = (_real(loc, "loc"), _real(scale, "scale"))
        if params[1] < 0:
            raise ValueError(f"dgvm.array.random: scale must be >= 0, got {scale}")
        return self._draw("normal", size, np.float64, params, chunks, client)

    def standard_normal(self, size=None, dtype=np.float64, *, chunks="auto", client=None):
        x = self.normal(0.0, 1.0, size, chunks=chunks, client=client)
        return x if np.dtype(dtype) == np.float64 else x.astype(dtype)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False, *,
                 chunks="auto", client=None):
        """Integers in [low, high) (``endpoint=True``: [low, high]); ``high=None``: [0, low)."""
        dtype = np.dtype(dtype)
        if dtype.kind not in "iub":
            raise TypeError(f"dgvm.array.random: integers() makes integer or bool arrays, not {dtype}")
        if high is None:
            low, high = 0, low
        for v, name in ((low, "low"), (high, "high")):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"dgvm.array.random: {name} must be an int, got {v!r}")
        low, top = int(low), int(high) - (0 if endpoint else 1)
        info = np.iinfo(np.uint8 if dtype.kind == "b" else dtype)
        lo_ok, hi_ok = (0, 1) if dtype.kind == "b" else (info.min, info.max)
        if low < lo_ok or top > hi_ok:
            raise ValueError(
                f"dgvm.array.random: [{low}, {top}] does not fit {dtype} ([{lo_ok}, {hi_ok}])")
        if top < low:
            raise ValueError(f"dgvm.array.random: low={low} must be below high={high}"
                             + (" (or equal, with endpoint=True)" if not endpoint else ""))
        return self._draw("integers", size, dtype, (low, top - low + 1), chunks, client)


def default_rng(seed=None) -> Generator:
    """A new ``Generator`` (``seed``: an int >= 0, a SeedSequence, None for fresh entropy,
    or a Generator, returned as it is)."""
    return seed if isinstance(seed, Generator) else Generator(seed)


_global: Generator | None = None


def _rng() -> Generator:
    global _global
    if _global is None:
        _global = Generator()
    return _global


def seed(seed=None) -> None:
    """Reset the module's generator (``random``, ``normal``, ...) to ``seed``."""
    global _global
    _global = Generator(seed)


def random(size=None, dtype=np.float64, *, chunks="auto", client=None):
    """Floats uniform in [0, 1) from the module's generator."""
    return _rng().random(size, dtype, chunks=chunks, client=client)


def uniform(low=0.0, high=1.0, size=None, *, chunks="auto", client=None):
    return _rng().uniform(low, high, size, chunks=chunks, client=client)


def normal(loc=0.0, scale=1.0, size=None, *, chunks="auto", client=None):
    return _rng().normal(loc, scale, size, chunks=chunks, client=client)


def standard_normal(size=None, *, chunks="auto", client=None):
    return _rng().standard_normal(size, chunks=chunks, client=client)


def integers(low, high=None, size=None, dtype=np.int64, endpoint=False, *, chunks="auto",
             client=None):
    return _rng().integers(low, high, size, dtype, endpoint, chunks=chunks, client=client)


def rand(*shape, chunks="auto"):
    """NumPy's legacy ``rand(d0, d1, ...)``: ``random(shape)``."""
    return random(shape or None, chunks=chunks)


def randn(*shape, chunks="auto"):
    """NumPy's legacy ``randn(d0, d1, ...)``: ``standard_normal(shape)``."""
    return standard_normal(shape or None, chunks=chunks)


def randint(low, high=None, size=None, dtype=np.int64, *, chunks="auto"):
    """NumPy's legacy ``randint``: ``integers(low, high, size, dtype)``."""
    return integers(low, high, size, dtype, chunks=chunks)
