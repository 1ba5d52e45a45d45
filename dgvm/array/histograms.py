"""NumPy's histograms: ``bincount``, ``histogram``, ``digitize``.

``bincount``: one pass finds the least and greatest values (the length of the result);
every block of ``x`` is counted on its worker into one row of a result per block, placed
beside it (``_engine.count_ops``), and the rows are summed as any reduction: one row per
block comes to the caller, and the counts stay there as a host value, as a reduction's.
So the caller holds ``blocks * length`` numbers for a moment: the length is the
greatest value plus one, not the size of the array.

``digitize`` is ``searchsorted`` on the bins; ``histogram`` is that and ``bincount``:
each element's bin is found where it lives (the edges are searched, so an element on an
edge goes where NumPy's own correction against the edges puts it), with the elements
outside the edges and the NaNs counted in one more bin that is dropped. The edges of
``bins=int`` are NumPy's own (``histogram_bin_edges`` over the range), made on the caller.
"""

from __future__ import annotations

import builtins
import operator

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.apply import apply
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.count_ops import BinCounts
from dgvm.array._engine.search_ops import MinMax
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.manipulation import flip, reshape
from dgvm.array.searching import searchsorted
from dgvm.array.sorting import check_array
from dgvm.array.statistical import max as max_of
from dgvm.array.statistical import min as min_of
from dgvm.array.statistical import sum as total_of
from dgvm.array.utility import all as all_of
from dgvm.array.utility import any as any_of
from dgvm.protocol.errors import NotSupported

__all__ = ["bincount", "digitize", "histogram"]


def _counts(x, weights, length: int) -> np.ndarray:
    """NumPy's ``bincount(x, weights, minlength=length)`` of a 1-d ``x`` whose values lie
    in ``[0, length)``, as a NumPy array (of ``length`` numbers)."""
    nb = x.numblocks[0]
    dtype = np.float64 if weights is not None else np.int64
    rows = type(x).allocated((nb, length), dtype, ((1,) * nb, (length,)), colocate=(x, list(range(nb))),
                             client=x.client, zero=False)
    starts = np.concatenate([[0], np.cumsum(x.chunks[0])]).astype(np.int64)
    inputs = [x] if weights is None else [x, weights]
    blockwise.run(BinCounts(starts, length, weights is not None, dtype), rows, inputs, "bincount")
    return total_of(rows, 0).host_value


def _array(value, like, name: str):
    """A DArray of ``value``: itself, or the caller's numbers placed in the cluster."""
    if isinstance(value, ArrayCore):
        return value
    value = np.asarray(value)
    if value.dtype == object:
        raise TypeError(f"dgvm.array: {name} must be a DArray or numbers, got {type(value).__name__}")
    return type(like).from_host(value, client=like.client)


@empty_aware
def bincount(x, /, weights=None, minlength=0):
    """How often each value ``0, 1, ..., max(x)`` occurs in the 1-d non-negative integer
    ``x`` (at least ``minlength`` of them); with ``weights``, the sum of their weights."""
    check_array(x, "bincount")
    if x.ndim != 1:
        raise ValueError(f"dgvm.array.bincount: x must be 1-d, got shape {x.shape}")
    if x.dtype.kind not in "biu" or not np.can_cast(x.dtype, np.int64):
        raise TypeError(f"dgvm.array.bincount: x must be of an integer dtype that casts safely to "
                        f"int64, got {x.dtype}")
    minlength = operator.index(minlength)
    if minlength < 0:
        raise ValueError(f"dgvm.array.bincount: minlength must not be negative, got {minlength}")
    if weights is not None:
        weights = _array(weights, x, "weights")
        if weights.shape != x.shape:
            raise ValueError(f"dgvm.array.bincount: weights of shape {weights.shape} do not match "
                             f"x of shape {x.shape}")
        if not np.can_cast(weights.dtype, np.float64):
            raise TypeError(f"dgvm.array.bincount: weights must cast safely to float64, got {weights.dtype}")
    bounds = np.stack(list(blockwise.collect(MinMax(), x, "bincount-bounds").values()))
    if bounds[:, 0].min() < 0:
        raise ValueError(f"dgvm.array.bincount: x must have no negative elements, found {bounds[:, 0].min()}")
    length = builtins.max(int(bounds[:, 1].max()) + 1, minlength)
    return type(x).on_caller(_counts(x, weights, length), x.client)


def _monotonic(bins) -> int:
    """1 if ``bins`` (a 1-d DArray) never decreases, -1 if it never increases, else 0."""
    if bins.shape[0] < 2:
        return 1
    later, earlier = bins[1:], bins[:-1]
    if all_of(apply("greater_equal", later, earlier)).host_value:
        return 1
    return -1 if all_of(apply("less_equal", later, earlier)).host_value else 0


@empty_aware
def digitize(x, bins, right=False):
    """The index of the bin of ``bins`` (1-d, increasing or decreasing) each element of
    ``x`` falls in: ``bins[i-1] <= x < bins[i]`` for increasing bins (``<`` and ``<=``
    swapped with ``right``); int64, of ``x``'s shape."""
    check_array(x, "digitize")
    if x.dtype.kind == "c":
        raise TypeError("dgvm.array.digitize: x may not be complex")
    bins = _array(bins, x, "bins")
    if bins.ndim != 1:
        raise ValueError(f"dgvm.array.digitize: bins must be 1-d, got shape {bins.shape}")
    direction = _monotonic(bins)
    if direction == 0:
        raise ValueError("dgvm.array.digitize: bins must be monotonically increasing or decreasing")
    side = "left" if right else "right"
    if direction == -1:
        return apply("subtract", bins.shape[0], searchsorted(flip(bins), x, side=side))
    return searchsorted(bins, x, side=side)


def _uniform_edges(a, bins: int, range):  # noqa: A002  (NumPy's name)
    """NumPy's edges of ``bins`` equal bins over ``range`` (None: ``a``'s least and
    greatest values, which must be finite)."""
    if range is None:
        first, last = min_of(a).host_value[()], max_of(a).host_value[()]
        if not (np.isfinite(first) and np.isfinite(last)):
            raise ValueError(f"dgvm.array.histogram: autodetected range of [{first}, {last}] is not finite")
        range = (first, last)
    # NumPy's own edges and checks, given the range: an empty stand-in has a's dtype.
    return np.histogram_bin_edges(np.empty(0, a.dtype), bins, range=range)


@empty_aware
def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002  (NumPy's name)
    """NumPy's histogram of ``a`` (flattened): ``(counts, edges)``. ``bins``: how many
    equal bins over ``range`` (default: ``a``'s least to greatest value), or the edges
    (increasing, a DArray or the caller's numbers). Each bin holds its left edge; the
    last also its right one. ``weights`` (``a``'s shape): sums of weights, not counts;
    ``density``: counts divided by their total and the bins' widths."""
    check_array(a, "histogram")
    if weights is not None:
        weights = _array(weights, a, "weights")
        if weights.shape != a.shape:
            raise ValueError(f"dgvm.array.histogram: weights should have the same shape as a, "
                             f"got {weights.shape} and {a.shape}")
        weights = reshape(weights, (-1,))
    if isinstance(bins, str):
        raise NotSupported(f"dgvm.array.histogram(bins={bins!r}): NumPy's bin estimators are not "
                           "supported by dgvm.array; give a number of bins or the edges")
    flat = reshape(a, (-1,))
    if isinstance(bins, ArrayCore):
        if bins.ndim != 1:
            raise ValueError(f"dgvm.array.histogram: bins must be 1d, when an array, got shape {bins.shape}")
        if bins.shape[0] > 1 and any_of(apply("less", bins[1:], bins[:-1])).host_value:
            raise ValueError("dgvm.array.histogram: bins must increase monotonically, when an array")
        edges = bins
    else:
        # Checked and made as NumPy does it (one dimension, increasing; range; bins >= 1).
        if np.ndim(bins) == 0:
            edges_np = _uniform_edges(a, operator.index(bins), range)
        else:
            edges_np = np.histogram_bin_edges(np.empty(0, a.dtype), bins)
        edges = type(a).from_host(edges_np, client=a.client)
    n = edges.shape[0] - 1
    last = edges[-1] if isinstance(bins, ArrayCore) else edges_np[-1]
    where = apply("subtract", searchsorted(edges, flat, side="right"), 1)
    where = apply("where", apply("equal", flat, last), n - 1, where)  # the last bin holds its right edge
    outside = apply("logical_or", apply("less", where, 0), apply("greater_equal", where, n))
    where = apply("where", outside, n, where)  # outside the edges, and NaN: the bin dropped
    if weights is not None and weights.dtype.kind == "c":
        counts = (_counts(where, apply("real", weights), n + 1)[:n]
                  + 1j * _counts(where, apply("imag", weights), n + 1)[:n])
    else:
        counts = _counts(where, weights, n + 1)[:n]
    if weights is not None:  # NumPy adds into counts of the weights' dtype
        counts = counts.astype(weights.dtype)
    if density and not isinstance(bins, ArrayCore):
        with np.errstate(all="ignore"):
            counts = counts / np.diff(edges_np) / counts.sum()
    hist = type(a).on_caller(counts, a.client)
    if density and isinstance(bins, ArrayCore):
        with np.errstate(all="ignore"):
            widths = apply("subtract", edges[1:], edges[:-1])
            hist = apply("divide", apply("divide", hist, widths), counts.sum())
    return hist, edges
