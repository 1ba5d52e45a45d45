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

PACKED = 1 << 20  # bytes of an array partial packed with the others; larger: sent as it is


class Packed:
    """Block -> partial, as ``pack`` laid it out: ``layout`` lists each block and its
    item, an item being ("array", group, offset, shape), ("tuple", [items]) or
    ("value", object); ``buffers`` holds one flat host array per group (a dtype, and
    whether its arrays were on the host already)."""

    __slots__ = ("layout", "buffers")

    def __init__(self, layout: list, buffers: dict):
        self.layout = layout
        self.buffers = buffers

    def __reduce__(self):
        return Packed, (self.layout, self.buffers)

    def __sizeof__(self) -> int:  # (what Dask counts of it)
        return 64 + sum(b.nbytes for b in self.buffers.values()) + 64 * len(self.layout)

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
    groups: dict = {}

    def item(v):
        if isinstance(v, tuple):
            return ("tuple", [item(i) for i in v])
        if (isinstance(v, (np.ndarray, xp.ndarray)) and v.dtype != object and v.dtype.isnative
                and v.nbytes <= PACKED):
            group = groups.setdefault((v.dtype, isinstance(v, np.ndarray)), [])
            offset = sum(a.size for a in group)
            group.append(v)
            return ("array", (v.dtype, isinstance(v, np.ndarray)), offset, tuple(v.shape))
        return ("value", v.get() if hasattr(v, "get") else v)  # (NumPy's, for the caller)

    layout = [(block, item(v)) for block, v in partials.items()]
    buffers = {}
    for (dtype, on_host), arrays in groups.items():
        buffers[(dtype, on_host)] = _flat(np if on_host else xp, arrays, dtype)
    return Packed(layout, buffers)


def _flat(side, arrays, dtype) -> np.ndarray:
    """``arrays`` end to end in one new host array (never a view of a chunk)."""
    try:
        flat = side.concatenate([a.ravel() for a in arrays])
    except MemoryError:  # (a full device: each one to the host, joined there)
        flat = np.concatenate([a.ravel().get() for a in arrays])
    flat = flat.get() if hasattr(flat, "get") else flat
    if flat.dtype != dtype:  # (structured dtypes that promote to an equal one)
        flat = flat.view(dtype)
    return flat
