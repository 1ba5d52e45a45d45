"""A reduction task's partials, carried as one buffer per dtype.

A task brings back one partial per chunk (a value, a row, a tuple of them). Each array
copied to the host on its own is one device wait and copy, and each sent on its own is a
header and frames of its own on both ends' event loops; for a worker's dozen partials of
a few kilobytes those cost more than their bytes. ``pack`` lays the small array partials
of a dtype end to end on the device (one copy to the host per dtype); the caller's
``unpack`` gives back block -> value, those arrays as views of the buffers. Larger
partials (at most ``PACKED`` bytes are packed) travel as they are, without a copy.
"""

from __future__ import annotations

import numpy as np
from distributed.sizeof import safe_sizeof

PACKED = 1 << 20  # bytes of an array partial packed with the others; larger: sent as it is


class Packed:
    """Block -> partial, as ``pack`` laid it out: ``layout`` lists each block and its
    item, an item being ("array", group, offset, shape), ("tuple", [items]) or
    ("value", object); ``buffers`` holds one flat host array per group (a dtype, and
    whether its arrays were on the host already)."""

    __slots__ = ("layout", "buffers", "values_nbytes")

    def __init__(self, layout: list, buffers: dict, values_nbytes: int = 0):
        self.layout = layout
        self.buffers = buffers
        self.values_nbytes = values_nbytes  # (of the "value" items: what Dask counts)

    def __reduce__(self):
        return Packed, (self.layout, self.buffers, self.values_nbytes)

    def __sizeof__(self) -> int:  # (what Dask counts of it)
        return 64 + sum(b.nbytes for b in self.buffers.values()) + self.values_nbytes + 64 * len(self.layout)

    def unpack(self) -> dict:
        return {block: self._item(item) for block, item in self.layout}

    def _item(self, item):
        kind = item[0]
        if kind == "value":
            return item[1]
        if kind == "tuple":
            return tuple(self._item(i) for i in item[1])
        _, group, offset, shape = item
        n = int(np.prod(shape, dtype=np.int64))
        return self.buffers[group][offset:offset + n].reshape(shape)


def pack(partials: dict, xp) -> Packed:
    """``partials`` (block -> an array of ``xp`` or NumPy, a host value, or tuples of
    them), their small arrays copied into one host buffer per dtype (and per side: those
    already on the host are not sent to the device and back)."""
    return to_host(lay_out(partials, xp))


def lay_out(partials: dict, xp) -> tuple:
    """``pack``'s first half, while the task's device work may still run: the layout, and
    per group the arrays end to end in one new array (queued on the device for theirs)."""
    groups: dict = {}  # group -> [arrays, elements so far]
    values = [0]

    def item(v):
        if isinstance(v, tuple):
            return ("tuple", [item(i) for i in v])
        if (isinstance(v, (np.ndarray, xp.ndarray)) and v.dtype != object and v.dtype.isnative
                and v.nbytes <= PACKED):
            key = (v.dtype, isinstance(v, np.ndarray))
            group = groups.setdefault(key, [[], 0])
            offset = group[1]
            group[0].append(v)
            group[1] += v.size
            return ("array", key, offset, tuple(v.shape))
        v = host(v)  # (NumPy's, for the caller)
        values[0] += safe_sizeof(v)
        return ("value", v)

    layout = [(block, item(v)) for block, v in partials.items()]
    flats = {key: _joined(np if key[1] else xp, arrays, key[0]) for key, (arrays, _) in groups.items()}
    return layout, flats, values[0]


def to_host(laid: tuple) -> Packed:
    """``pack``'s second half, once the device work ended: each group's array copied here."""
    layout, flats, values_nbytes = laid
    return Packed(layout, {key: host(flat) for key, flat in flats.items()}, values_nbytes)


def _joined(side, arrays, dtype):
    """``arrays`` end to end in one new array (never a view of a chunk)."""
    try:
        flat = side.concatenate([a.ravel() for a in arrays])
    except MemoryError:  # (a full device: each one to the host, joined there)
        flat = np.concatenate([np.ravel(host(a)) for a in arrays])
    if flat.dtype != dtype:  # (structured dtypes that promote to an equal one)
        flat = flat.view(dtype)
    return flat


def host(value):
    """``value`` (an array, a host value, or tuples of them) with its device arrays copied
    to the host."""
    if isinstance(value, tuple):
        return tuple(host(v) for v in value)
    return value.get() if hasattr(value, "get") else value
