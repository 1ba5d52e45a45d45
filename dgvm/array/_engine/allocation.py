"""The GVAT allocation behind an array: a kept one of the same layout, or a new one."""

from __future__ import annotations

import math

import numpy as np

from dgvm.array._engine.clients import client_for
from dgvm.array._engine.lifecycle import releases_of
from dgvm.client.allocation import AllocationHandle
from dgvm.client.buffer import placement_request, replicas_request
from dgvm.protocol.errors import DgvmError, OutOfDeviceMemory


class NoElements(DgvmError):
    """Asked for the allocation of an array with no elements, which has none: it is held
    on the caller (``zero_size``). A public function that meets this answers an empty
    array of that shape and dtype and of class ``cls`` instead (``zero_size.empty_aware``);
    anyone else gets the error."""

    def __init__(self, shape, dtype, client=None, cls=None):
        super().__init__(f"a {tuple(shape)} {np.dtype(dtype)} array has no elements: it is held on "
                         "the caller and has no allocation (dgvm.array._engine.zero_size)")
        self.shape, self.dtype, self.client, self.cls = tuple(shape), np.dtype(dtype), client, cls


def allocate(shape, dtype, grid, placement=None, colocate=None, client=None, zero=True,
             replicas=None) -> AllocationHandle:
    """The GVAT allocation for an array of this shape, dtype and chunk grid (zero-filled
    unless ``zero=False``: for results whose every element the next task writes), with
    ``replicas`` copies of each chunk (the config's ``replicas`` when None)."""
    client = client_for(client)
    if math.prod(shape) == 0:  # nothing to place: the caller holds it (zero_size)
        raise NoElements(shape, dtype, client)
    releases = releases_of(client)
    # An operation's result (written whole by its task, placed by its inputs) may take
    # over a released one's allocation, and be reused once released; not host data.
    copies = replicas_request(replicas)
    reusable = not zero and colocate is not None and copies["replicas"] == 1
    kept = releases.kept.take(shape, np.dtype(dtype), grid, colocate) if reusable else None
    if kept is not None:  # ordered after the tasks still running on it
        alloc, after = kept
        alloc.pending.wrote(after)
        alloc.unfilled = True  # its values are a released array's until written
        return alloc

    def create():
        return AllocationHandle.create(
            client, shape=list(shape), dtype=np.dtype(dtype).str, chunks=[list(c) for c in grid],
            zero=bool(zero), **placement_request(placement, colocate), **copies,
        )

    try:
        alloc = create()
    except OutOfDeviceMemory:
        if not releases.kept.flush():
            raise
        releases.drain()  # the kept allocations are freed: room, perhaps
        alloc = create()
    alloc.reusable = reusable
    # Not zero-filled: no values until its first operation writes them. If that one fails,
    # the array has none, and every read says so (``dgvm.client.failures``, a fill).
    alloc.unfilled = not zero
    return alloc
