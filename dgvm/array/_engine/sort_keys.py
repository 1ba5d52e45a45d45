"""The sort order, on the workers' array module (NumPy or CuPy), and lines of keys.

Values are compared through a sort key: floats with every NaN made one quiet NaN and
-0.0 made +0.0, booleans as uint8. On such keys NumPy's and CuPy's sorts (merge or
radix) and the binary searches here agree on one order: ascending, NaN after +inf
(NumPy's convention), -0.0 equal to +0.0. ``descending=True`` is that order reversed, so
NaN come first there, as in ``np.flip(np.sort(x))``; a stable descending sort keeps equal
elements in their original order (the standard's rule). Sorts are always stable
(``stable=False`` is allowed to be stable). Complex values are in NumPy's order:
lexicographic (real part, then imaginary), those with a NaN part after all the others, in
the order none < imaginary NaN < real NaN < both; the sorts take one stable pass per key
(imaginary, real, NaN class), the searches compare the three keys. Sorting
(``sort_splits``, ``sort_ops``), searching and the set functions share this order.
"""

from __future__ import annotations

import numpy as np

def sort_key(a, xp):
    """``a`` as keys that every backend sorts in one order (see the module notes)."""
    if a.dtype.kind == "f":
        return xp.where(xp.isnan(a), xp.asarray(np.nan, dtype=a.dtype), a + a.dtype.type(0))
    if a.dtype.kind == "c":
        return a + a.dtype.type(0)  # -0.0 parts made +0.0; NaN parts are keyed apart
    if a.dtype.kind == "b":
        return a.astype(np.uint8)
    return a


def order_key(a, xp):
    """Keys for the sorts (not the searches): NumPy's own sorts already put raw values in
    the order (NaN last, -0.0 level with +0.0, complex values NumPy's way), so on NumPy
    they sort the values as they are, without a pass that makes keys."""
    return a if xp is np else sort_key(a, xp)


def mixed_zeros(a, xp) -> bool:
    """Whether ``a`` holds equal values that a sort of values alone could still tell apart:
    zeros of both signs (complex values: always assumed). Only then need it be stable."""
    if a.dtype.kind == "c":
        return True
    if a.dtype.kind != "f":
        return False
    signs = xp.signbit(a[a == 0])
    return bool(signs.any()) and not bool(signs.all())


def _complex_keys(k, xp):
    """A complex key's three real keys, least significant first: the imaginary part, the
    real part, and which parts are NaN (0 none, 1 imaginary, 2 real, 3 both)."""
    re, im = sort_key(xp.real(k), xp), sort_key(xp.imag(k), xp)
    nan_class = xp.isnan(re).astype(np.uint8) * np.uint8(2) + xp.isnan(im).astype(np.uint8)
    return im, re, nan_class


def stable_argsort(k, xp):
    # NumPy's own stable sort has this order for complex keys (NaN parts last, by class);
    # other backends sort them one real key at a time.
    if k.dtype.kind == "c" and xp is not np:
        order = None
        for part in _complex_keys(k, xp):  # stable passes, the most significant last
            if order is not None:
                part = xp.take_along_axis(part, order, axis=-1)
            step = stable_argsort(part, xp)
            order = step if order is None else xp.take_along_axis(order, step, axis=-1)
        return order
    if xp is np:
        return np.argsort(k, axis=-1, kind="stable")
    return xp.argsort(k, axis=-1)  # CuPy's sorts are always stable and take no ``kind``


def argsort_lines(k, descending: bool, xp):
    """Stable argsort of keys along the last axis; descending keeps ties in order."""
    if descending:
        n = k.shape[-1]
        return (n - 1) - xp.flip(stable_argsort(xp.flip(k, axis=-1), xp), axis=-1)
    return stable_argsort(k, xp)


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
    # Complex keys compare as their three real keys: made once here, not at every step.
    complex_ = lines.dtype.kind == "c" or queries.dtype.kind == "c"
    if xp is np and not complex_:
        return _searched(lines, queries, inclusive, descending)
    flat = lines.reshape(-1)
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


def _searched(lines, queries, inclusive, descending: bool):
    """``count_before`` by NumPy's own binary search, a row at a time: its order of real
    keys is this one (NaN last, -0.0 level with +0.0). A descending line is searched
    reversed: what comes before a query there is what comes after it ascending."""
    m, n = lines.shape
    queries = np.asarray(queries)
    level = np.broadcast_to(np.asarray(inclusive, dtype=bool), queries.shape)
    out = np.empty(queries.shape, dtype=np.int64)
    for i in range(m):
        line = lines[i, ::-1] if descending else lines[i]
        left = np.searchsorted(line, queries[i], side="left")
        right = np.searchsorted(line, queries[i], side="right")
        before, through = (n - right, n - left) if descending else (left, right)
        out[i] = np.where(level[i], through, before)
    return out


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


def cross_of(block: tuple, axis: int) -> tuple:
    """The block indices of ``block`` off ``axis``."""
    return block[:axis] + block[axis + 1:]


def block_starts(chunks) -> list[np.ndarray]:
    """Per axis: where each block starts, and the axis's length last."""
    return [np.concatenate([[0], np.cumsum(c)]).astype(np.int64) for c in chunks]
