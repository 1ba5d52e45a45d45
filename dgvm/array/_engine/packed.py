"""A reduction task's partials, carried as one buffer per dtype.

A task brings back one partial per chunk (a value, a row, a tuple of them). Each array
copied to the host on its own is one device wait and copy, and each sent on its own is a
header and frames of its own on both ends' event loops; for a worker's dozen partials of
a few kilobytes those cost more than their bytes. ``pack`` lays every array partial of a
dtype end to end on the device (one copy to the host per dtype); the caller's ``unpack``
gives back block -> value, the arrays as views of those buffers.
"""

from __future__ import annotations

import numpy as np


class Packed:
    """Block -> partial, as ``pack`` laid it out: ``layout`` lists per block whether it
    was a tuple and its items (("array", group, offset, shape) or ("value", object));
    ``buffers`` holds one flat host array per group (a dtype, on the host or not)."""

    __slots__ = ("layout", "buffers")

    def __init__(self, layout: list, buffers: dict):
        self.layout = layout
        self.buffers = buffers

    def __reduce__(self):
        return Packed, (self.layout, self.buffers)

    def unpack(self) -> dict:
        out = {}
        for block, is_tuple, items in self.layout:
            values = tuple(self._item(i) for i in items)
            out[block] = values if is_tuple else values[0]
        return out

    def _item(self, item):
        if item[0] == "value":
            return item[1]
        _, group, offset, shape = item
        n = int(np.prod(shape, dtype=np.int64))
        return self.buffers[group][offset:offset + n].reshape(shape)


def pack(partials: dict, xp) -> Packed:
    """``partials`` (block -> an array of ``xp`` or NumPy, a host value, or a tuple of
    them), their arrays copied into one host buffer per dtype (and per side: those
    already on the host are not sent to the device and back)."""
    layout, groups = [], {}
    for block, value in partials.items():
        is_tuple = isinstance(value, tuple)
        items = []
        for v in (value if is_tuple else (value,)):
            if isinstance(v, (np.ndarray, xp.ndarray)) and v.dtype != object:
                key = (v.dtype.str, isinstance(v, np.ndarray))
                group = groups.setdefault(key, [])
                offset = sum(a.size for a in group)
                group.append(v)
                items.append(("array", key, offset, tuple(v.shape)))
            else:
                items.append(("value", v))
        layout.append((block, is_tuple, items))
    buffers = {}
    for (dtype, on_host), arrays in groups.items():
        side = np if on_host else xp
        flat = side.concatenate([a.ravel() for a in arrays])  # (a new array: never a chunk's view)
        buffers[(dtype, on_host)] = flat.get() if hasattr(flat, "get") else flat
    return Packed(layout, buffers)
