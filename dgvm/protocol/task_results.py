"""How a direct task's result crosses from its worker to its client.

A result that msgpack carries as it is (None, a bool, a float, a 64-bit int) goes inside
the answer. A small one of anything else (the partials of a reduction over small chunks:
a dict of tiny NumPy arrays) is pickled on the worker's task thread into the answer, and
unpickled by the client's program thread when it asks for the value: Dask's own
serialization walks a collection and gives each array a header and frames of its own, on
the event loops of both ends, which costs more than the arrays' bytes when they are few.
A larger one is serialized on the task's thread as Dask's comms would, arrays as frames
of their own without a copy (one that cannot be fails its task, not the connection).
"""

from __future__ import annotations

import dask
from dask.utils import parse_bytes
from distributed.protocol import Serialized, pickle, to_serialize
from distributed.protocol.serialize import serialize_and_split
from distributed.sizeof import safe_sizeof

INLINE_RESULT = 64 << 10  # bytes of a pickled result sent inside its answer; larger: Dask's frames


def plain(value) -> bool:
    """Does msgpack carry ``value`` as it is?"""
    return value is None or type(value) in (bool, float) or (
        type(value) is int and -(1 << 63) <= value < (1 << 64))


def encode(value) -> dict:
    """The answer's fields for ``value`` (on the task's thread): ``{"result": value}``
    (plain, or serialized as Dask's comms do) or ``{"pickled": [bytes, *buffers]}``.
    Raises what pickling or serializing raises."""
    if plain(value):
        return {"result": value}
    if safe_sizeof(value) > INLINE_RESULT:  # (not pickled for nothing)
        return {"result": _serialized(value)}
    buffers: list = []  # (arrays' bytes, not copied unless the result is small)
    data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    views = [memoryview(b) for b in buffers]
    if len(data) + sum(v.nbytes for v in views) > INLINE_RESULT:
        return {"result": _serialized(value)}
    return {"pickled": [data, *(v.tobytes() for v in views)]}


def _serialized(value):
    """``value`` serialized as Dask's comms would (each element of a collection on its
    own, arrays as frames not copied, frames split at ``distributed.comm.shard``), here
    on the task's thread: what cannot be fails the task, not the connection."""
    shard = parse_bytes(dask.config.get("distributed.comm.shard"))
    header, frames = serialize_and_split(to_serialize(value), serializers=("dask", "pickle"),
                                         on_error="raise", size=shard)
    return Serialized(header, frames)


class Pickled:
    """A small result as it arrived, unpickled on first use (``value``)."""

    __slots__ = ("parts",)

    def __init__(self, parts: list):
        self.parts = parts

    def value(self):
        data, *buffers = self.parts
        # (writable buffers: the arrays unpickled over them are the caller's to change)
        return pickle.loads(data, buffers=[bytearray(b) for b in buffers])
