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
The generator and the op of a draw are ``_engine.philox``'s.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.clients import client_for, current_client_or_none
from dgvm.array._engine.philox import Draw, philox4x32
from dgvm.array.creation import empty
from dgvm.client.session import session_of

__all__ = [
    "Generator", "default_rng", "integers", "normal", "philox4x32", "rand", "randint", "randn",
    "random", "seed", "standard_normal", "uniform",
]


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
        op = Draw(kind, self._key, self._calls, (), np.dtype(dtype).str, params)
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


class _SeedBeforeConnect:
    """A ``seed()`` called while no cluster is connected: the next session's module
    generator starts from it (as ``numpy.random.seed`` then ``numpy.random.random``)."""

    def __init__(self):
        self.seeded = False
        self.value = None

    def take(self) -> tuple[bool, object]:
        seeded, value = self.seeded, self.value
        self.seeded, self.value = False, None
        return seeded, value


_seed_before_connect = _SeedBeforeConnect()


class _ModuleGenerator:
    """The generator of the module's functions (``random``, ``normal``, ...): one per
    client session (``dgvm.client.session``), so two clients in one process draw from
    their own, and a fresh client starts unseeded (or from a seed given before it)."""

    def __init__(self, session):
        seeded, value = _seed_before_connect.take()
        self.generator: Generator | None = Generator(value) if seeded else None


def _module_generator(client=None) -> _ModuleGenerator:
    # The client an array would be made on (the first starts a local cluster, as any
    # dgvm.array call does).
    return session_of(client_for(client)).part(_ModuleGenerator)


def _rng(client=None) -> Generator:
    part = _module_generator(client)
    if part.generator is None:
        part.generator = Generator()
    return part.generator


def seed(seed=None, *, client=None) -> None:
    """Reset the module's generator (``random``, ``normal``, ...) to ``seed``: that of the
    session of ``client``, default the current one; with no cluster connected, the one the
    next connection's draws come from (no cluster is started for it)."""
    if client is None and current_client_or_none() is None:
        _seed_before_connect.seeded, _seed_before_connect.value = True, seed
        return
    _module_generator(client).generator = Generator(seed)


def random(size=None, dtype=np.float64, *, chunks="auto", client=None):
    """Floats uniform in [0, 1) from the module's generator."""
    return _rng(client).random(size, dtype, chunks=chunks, client=client)


def uniform(low=0.0, high=1.0, size=None, *, chunks="auto", client=None):
    return _rng(client).uniform(low, high, size, chunks=chunks, client=client)


def normal(loc=0.0, scale=1.0, size=None, *, chunks="auto", client=None):
    return _rng(client).normal(loc, scale, size, chunks=chunks, client=client)


def standard_normal(size=None, *, chunks="auto", client=None):
    return _rng(client).standard_normal(size, chunks=chunks, client=client)


def integers(low, high=None, size=None, dtype=np.int64, endpoint=False, *, chunks="auto",
             client=None):
    return _rng(client).integers(low, high, size, dtype, endpoint, chunks=chunks, client=client)


def rand(*shape, chunks="auto"):
    """NumPy's legacy ``rand(d0, d1, ...)``: ``random(shape)``."""
    return random(shape or None, chunks=chunks)


def randn(*shape, chunks="auto"):
    """NumPy's legacy ``randn(d0, d1, ...)``: ``standard_normal(shape)``."""
    return standard_normal(shape or None, chunks=chunks)


def randint(low, high=None, size=None, dtype=np.int64, *, chunks="auto"):
    """NumPy's legacy ``randint``: ``integers(low, high, size, dtype)``."""
    return integers(low, high, size, dtype, chunks=chunks)
