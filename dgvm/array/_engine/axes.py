"""Shapes, axes and broadcasting: the arithmetic operations share (no arrays are made here)."""

from __future__ import annotations

import operator

import numpy as np

from dgvm.protocol.arguments import shown


def normalize_shape(shape) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints, as NumPy takes them) as a tuple of ints,
    none negative; TypeError or ValueError naming the shape."""
    try:
        dims = (operator.index(shape),)
    except TypeError:
        try:
            dims = tuple(operator.index(s) for s in shape)
        except TypeError:
            raise TypeError(f"shape must be an integer or a sequence of integers, got {shown(shape)}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {dims}")
    return dims


def normalize_axis(axis, ndim: int, *, sort: bool = True) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple) -> tuple of non-negative axes, sorted unless
    ``sort=False``; AxisError for an axis out of range, ValueError for a repeated one."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise np.exceptions.AxisError(f"axis {a} is out of bounds for an array of {ndim} dimensions")
        out.append(int(a) % max(ndim, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(out)) if sort else tuple(out)


def broadcast_region(shape, lo, hi) -> tuple[list, list]:
    """The region of an input of ``shape`` that broadcasts onto the elements ``[lo, hi)``
    of a result: aligned on the right, its length-1 axes read at 0."""
    d = len(lo) - len(shape)
    return ([0 if shape[j] == 1 else lo[j + d] for j in range(len(shape))],
            [1 if shape[j] == 1 else hi[j + d] for j in range(len(shape))])


def broadcast_chunks(arrays, shape) -> tuple:
    """Chunks of a broadcast result of ``shape``: per axis, those of an input (anything
    with ``shape``, ``ndim`` and ``chunks``) that spans that axis, else one chunk."""
    chunks = []
    for ax, n in enumerate(shape):
        for a in arrays:
            d = len(shape) - a.ndim
            if ax >= d and a.shape[ax - d] == n:
                chunks.append(a.chunks[ax - d])
                break
        else:
            chunks.append((n,))
    return tuple(chunks)
