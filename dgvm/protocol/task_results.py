"""How a direct task's result crosses from its worker to its client.

A result that msgpack carries as it is (None, a bool, a float, a 64-bit int) goes inside
the answer. Anything else (partials of a reduction: a dict of small NumPy arrays, tuples
of them) is pickled once on the worker's task thread, into one buffer, and unpickled by
the client's program thread when it asks for the value. Dask's own serialization walks a
collection and gives each array a header and frames of its own, on the event loops of
both ends, where every other task's messages wait: about 0.1 ms per array each way.
"""

from __future__ import annotations

from distributed.protocol import pickle, to_serialize

INLINE_RESULT = 1 << 20  # bytes of a pickled result sent inside its answer; larger: a frame


def plain(value) -> bool:
    """Does msgpack carry ``value`` as it is?"""
    return value is None or type(value) in (bool, float) or (
        type(value) is int and -(1 << 63) <= value < (1 << 64))


def encode(value) -> dict:
    """The answer's fields for ``value`` (on the task's thread): ``{"result": value}`` or
    ``{"pickled": bytes}``. Raises what pickling raises."""
    if plain(value):
        return {"result": value}
    data = pickle.dumps(value, protocol=5)
    return {"pickled": data if len(data) <= INLINE_RESULT else to_serialize(data)}


class Pickled:
    """A result as it arrived, unpickled on first use (``value``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def value(self):
        return pickle.loads(self.data)
