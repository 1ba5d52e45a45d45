"""``dgvm.malloc`` and ``GlobalBuffer``: one flat range of global memory, read and written
by global offset; the pieces may span chunks on any number of workers."""

from __future__ import annotations

import numpy as np
from distributed import Client

from dgvm import config
from dgvm.client import progress
from dgvm.client.allocation import AllocationHandle
from dgvm.protocol.errors import InvalidAddress


def _positive_int(name: str, value) -> int:
    try:
        n = config.to_bytes(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of bytes, got {value!r}") from None
    if n <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return n


def placement_request(placement: str | None, colocate) -> dict:
    """Turn ``placement=`` / ``colocate=`` arguments into GVAT request fields."""
    if isinstance(colocate, tuple):  # (array, picks): chunk i near chunk picks[i] of array
        other, picks = colocate
        other = getattr(getattr(other, "alloc", other), "alloc_id", other)
        return {"placement": "balanced", "colocate": [int(other), [int(i) for i in picks]]}
    if colocate is not None:
        other = getattr(colocate, "alloc", colocate)  # a DArray, a GlobalBuffer or an id
        other = getattr(other, "alloc_id", other)
        return {"placement": "balanced", "colocate": int(other)}
    return {"placement": placement or config.get("placement.default")}


class GlobalBuffer(AllocationHandle):
    """A flat buffer of global device memory made by ``dgvm.malloc``.

    ``buf.vaddr`` is its first global address, ``buf.chunks`` says where each chunk
    lives. Use ``free()`` or a ``with`` block to give the memory back.
    """

    def _span(self, offset: int, length: int):
        """(chunk index, offset in chunk, length, offset in the request) for a byte range."""
        self.check_live()
        if offset < 0 or length < 0 or offset + length > self.nbytes:
            raise InvalidAddress(
                f"bytes [{offset}, {offset + length}) asked of a buffer of {self.nbytes} bytes "
                f"at {self.vaddr:#x}"
            )
        off = self.offsets
        first = int(np.searchsorted(off, offset, side="right")) - 1
        pos = offset
        end = offset + length
        k = first
        while pos < end:
            stop = min(end, int(off[k + 1]))
            yield k, pos - int(off[k]), stop - pos, pos - offset
            pos = stop
            k += 1

    def write(self, offset: int, data) -> None:
        """Copy ``data`` (bytes-like or ndarray) to global bytes ``[offset, offset + len)``.
        (A large write on a terminal goes in batches behind a progress bar.)"""
        raw = np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), dtype=np.uint8)
        pieces = [(k, o, raw[r : r + n]) for k, o, n, r in self._span(offset, raw.size)]
        for batch in progress.batches(pieces, "write", raw.size):
            self.put(batch)

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        """A new host uint8 array with global bytes ``[offset, offset + nbytes)``.
        (A large read on a terminal goes in batches behind a progress bar.)"""
        spans = list(self._span(offset, nbytes))
        out = np.empty(nbytes, dtype=np.uint8)
        for batch in progress.batches(spans, "read", nbytes):
            for (k, o, n, r), a in zip(batch, self.get([(k, o, n) for k, o, n, _ in batch])):
                out[r : r + n] = a
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.freed:
            self.free()

    def __len__(self):
        return self.nbytes

    def __repr__(self):
        state = "freed" if self.freed else f"{self.nchunks} chunks on {len(set(self._home.tolist()))} workers"
        return f"<dgvm.GlobalBuffer id={self.alloc_id} vaddr={self.vaddr:#x} nbytes={self.nbytes} {state}>"


def malloc(
    nbytes,
    chunk_bytes=None,
    placement: str | None = None,
    colocate=None,
    client: Client | None = None,
) -> GlobalBuffer:
    """Allocate ``nbytes`` of global device memory, zero-filled, cut into chunks.

    ``placement`` is ``"balanced"`` (default), ``"packed"`` or ``"round_robin"``;
    ``colocate=other`` puts chunk i where chunk i of ``other`` lives. Raises
    ``dgvm.OutOfDeviceMemory`` when the cluster's free device memory cannot hold it.
    """
    nbytes = _positive_int("nbytes", nbytes)
    chunk = _positive_int("chunk_bytes", chunk_bytes if chunk_bytes is not None else config.get("chunk-bytes"))
    chunk = min(chunk, nbytes)
    request = dict(nbytes=nbytes, chunk_bytes=chunk, **placement_request(placement, colocate))
    return GlobalBuffer.create(client, **request)
