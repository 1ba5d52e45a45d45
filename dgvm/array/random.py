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
- ``choice``: with replacement, ``integers`` (or, given ``p``, the inverse of the
  cumulative ``p`` at ``random``: one ``searchsorted``); without, the first ``size`` of
  the ``argsort`` of one key per element of the population (``random``, or, given ``p``,
  ``-log(1 - random) / p``: Efraimidis and Spirakis's weighted keys, the law of drawing
  one by one in proportion to ``p`` among those left). Elements of an array population
  are gathered where its chunks live.
``size=None`` gives a NumPy scalar (element 0 of the call), computed on the caller.

This is not NumPy's stream: the same seed gives other numbers than ``numpy.random``.
The generator and the op of a draw are ``_engine.philox``'s.
"""

from __future__ import annotations

import numpy as np

import math
import operator

from dgvm.array._engine import blockwise
from dgvm.array._engine.clients import client_for, current_client_or_none
from dgvm.array._engine.philox import Draw, philox4x32
from dgvm.array._engine.search_ops import Gather1d
from dgvm.array.array_object import DArray
from dgvm.array.creation import empty
from dgvm.array.conversion import from_numpy
from dgvm.array.elementwise import divide, log1p, negative
from dgvm.array.manipulation import reshape
from dgvm.array.searching import count_nonzero, searchsorted
from dgvm.array.sorting import argsort
from dgvm.array.statistical import cumulative_sum, min as min_of, sum as total_of
from dgvm.client.session import session_of

__all__ = [
    "Generator", "choice", "default_rng", "integers", "normal", "philox4x32", "rand", "randint",
    "randn", "random", "random_sample", "seed", "standard_normal", "uniform",
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
        size = _shape(size)
        op = Draw(kind, self._key, self._calls, (), np.dtype(dtype).str, params)
        self._calls += 1
        if size is None:
            return op.values([], [], np)[()]
        x = empty(size, dtype, chunks=chunks, client=client)
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

    def choice(self, a, size=None, replace=True, p=None, *, chunks="auto", client=None):
        """A sample of ``size`` from ``a`` (an int n: ``arange(n)``; a 1-d DArray or host
        sequence: its elements), with or without ``replace``ment, uniform or with
        probabilities ``p`` (host or DArray, one per element, summing to 1)."""
        population, n = _population(a)
        shape = _shape(size)
        k = 1 if shape is None else math.prod(shape)
        if n == 0 and k:
            raise ValueError("dgvm.array.random.choice: a cannot be empty unless no samples are taken")
        weights = _weights(p, n, client)
        if not replace and k > n:
            raise ValueError(f"dgvm.array.random.choice: cannot take a larger sample ({k}) than the "
                             f"population ({n}) when replace is False")
        if not k:
            return empty(shape, population.dtype if population is not None else np.int64, client=client)
        draw_shape = (1,) if shape is None else shape
        if replace and weights is None:
            idx = self.integers(0, n, draw_shape, chunks=chunks, client=client)
        elif replace:
            cdf = cumulative_sum(weights)
            cdf = divide(cdf, cdf[-1])  # exactly 1 at the end: every draw below 1 finds its element
            idx = searchsorted(cdf, self.random(draw_shape, chunks=chunks, client=client), side="right")
        else:
            keys = self.random(n, client=client)
            if weights is not None:
                if int(count_nonzero(weights)) < k:
                    raise ValueError("dgvm.array.random.choice: fewer non-zero entries in p than size")
                # p = 0 gives the key inf (or NaN for u = 0), sorted after every other
                keys = divide(negative(log1p(negative(keys))), weights)
            idx = reshape(argsort(keys)[:k], draw_shape)
        if population is not None:
            values = type(population).allocated(idx.shape, population.dtype, idx.chunks, colocate=idx,
                                                client=client)
            blockwise.run(Gather1d(), values, [idx, population], "random-choice")
            idx = values
        return idx.to_numpy()[0] if shape is None else idx

    def random_sample(self, size=None, *, chunks="auto", client=None):
        """NumPy's legacy name of ``random`` (float64)."""
        return self.random(size, chunks=chunks, client=client)


def _shape(size, what: str = "size"):
    """``size`` as a shape (None: one value, a scalar); NumPy's TypeError for others."""
    if size is None:
        return None
    try:
        return (operator.index(size),)
    except TypeError:
        pass
    try:
        return tuple(operator.index(s) for s in size)
    except TypeError:
        raise TypeError(f"dgvm.array.random: {what} must be an int or a tuple of ints, got {size!r}") from None


def _population(a) -> tuple:
    """(the population array or None for ``arange(n)``, n)."""
    if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)):
        if a < 0:
            raise ValueError(f"dgvm.array.random.choice: a must be a non-negative integer or an array, got {a}")
        return None, int(a)
    x = a if isinstance(a, DArray) else from_numpy(np.asarray(a))
    if x.ndim != 1:
        raise ValueError(f"dgvm.array.random.choice: a must be 1-dimensional or an integer, got shape {x.shape}")
    return x, x.shape[0]


def _weights(p, n: int, client):
    """``p`` as a float64 DArray of n probabilities (None: uniform), NumPy's checks."""
    if p is None:
        return None
    if isinstance(p, DArray):
        w = p.astype(np.float64, copy=False)
        if w.ndim != 1:
            raise ValueError(f"dgvm.array.random.choice: p must be 1-dimensional, got shape {w.shape}")
        low, total = float(min_of(w)), float(total_of(w))
    else:
        host = np.asarray(p, dtype=np.float64)
        if host.ndim != 1:
            raise ValueError(f"dgvm.array.random.choice: p must be 1-dimensional, got shape {host.shape}")
        low = float(host.min()) if host.size else 0.0
        total = float(host.sum())
        w = None
    if (w.shape[0] if w is not None else host.shape[0]) != n:
        raise ValueError(f"dgvm.array.random.choice: a and p must have the same size ({n} and "
                         f"{(w.shape[0] if w is not None else host.shape[0])})")
    if not low >= 0:
        raise ValueError("dgvm.array.random.choice: probabilities are not non-negative")
    if abs(total - 1.0) > math.sqrt(np.finfo(np.float64).eps):
        raise ValueError(f"dgvm.array.random.choice: probabilities do not sum to 1 (they sum to {total})")
    return w if w is not None else from_numpy(host, client=client)


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


def random_sample(size=None, *, chunks="auto", client=None):
    """NumPy's legacy ``random_sample(size)``: floats uniform in [0, 1)."""
    return _rng(client).random(size, chunks=chunks, client=client)


def choice(a, size=None, replace=True, p=None, *, chunks="auto", client=None):
    """NumPy's ``choice(a, size, replace, p)`` from the module's generator (see
    ``Generator.choice``)."""
    return _rng(client).choice(a, size, replace, p, chunks=chunks, client=client)


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
    return random(_shape(shape, "each dimension") or None, chunks=chunks)


def randn(*shape, chunks="auto"):
    """NumPy's legacy ``randn(d0, d1, ...)``: ``standard_normal(shape)``."""
    return standard_normal(_shape(shape, "each dimension") or None, chunks=chunks)


def randint(low, high=None, size=None, dtype=np.int64, *, chunks="auto"):
    """NumPy's legacy ``randint``: ``integers(low, high, size, dtype)``."""
    return integers(low, high, size, dtype, chunks=chunks)
