"""``dgvm.malloc`` and ``GlobalBuffer``: one flat range of global memory, read and written
by global offset; the pieces may span chunks on any number of workers."""

from __future__ import annotations

import numpy as np
from distributed import Client

from dgvm import config
from dgvm.client import progress
from dgvm.client.allocation import AllocationHandle
from dgvm.gvat import copies
from dgvm.gvat.placement import POLICIES
from dgvm.protocol import arguments
from dgvm.protocol.errors import InvalidAddress, InvalidArgument, InvalidArgumentType


def _positive_int(name: str, value) -> int:
    """A number of bytes: an integer, or a string such as "4 GiB"."""
    if isinstance(value, str):
        try:
            n = config.to_bytes(arguments.text(name, value))
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgument(f"{name} must be a number of bytes, got {value!r}") from None
        return arguments.integer(name, n, 1)
    return arguments.integer(name, value, 1)


def _partner(name: str, other) -> int:
    """The allocation id of a ``colocate=`` partner: a DArray, a GlobalBuffer or an id."""
    handle = getattr(other, "alloc", other)
    if isinstance(handle, AllocationHandle):  # (the GVAT says if it was freed)
        return handle.alloc_id
    return arguments.integer(name, other, 1)


def placement_request(placement: str | None, colocate) -> dict:
    """Turn ``placement=`` / ``colocate=`` arguments into GVAT request fields."""
    if isinstance(colocate, tuple):  # (array, picks): chunk i near chunk picks[i] of array
        other, picks = arguments.sequence("colocate", colocate, 2)
        picks = arguments.integers("colocate picks", picks, -1)  # -1: no partner
        return {"placement": "balanced", "colocate": [_partner("colocate", other), picks]}
    if colocate is not None:
        return {"placement": "balanced", "colocate": _partner("colocate", colocate)}
    if placement is None:
        return {"placement": config.get("placement.default")}
    return {"placement": arguments.text("placement", placement, POLICIES)}


def replicas_request(replicas) -> dict:
    """The GVAT request field of ``replicas=`` (copies of each chunk; the config's
    ``replicas`` when None)."""
    if replicas is None:
        replicas = config.get("replicas")
    return {"replicas": arguments.integer("replicas", replicas, 1, copies.MAX_COPIES)}


class GlobalBuffer(AllocationHandle):
    """A flat buffer of global device memory made by ``dgvm.malloc``.

    ``buf.vaddr`` is its first global address, ``buf.chunks`` says where each chunk
    lives. Use ``free()`` or a ``with`` block to give the memory back.
    """

    def _span(self, offset: int, length: int, length_name: str = "nbytes"):
        """(chunk index, offset in chunk, length, offset in the request) for a byte range."""
        self.check_live()
        offset = arguments.integer("offset", offset, None, None)
        length = arguments.integer(length_name, length, 0, None)
        if offset < 0 or offset + length > self.nbytes:
            raise InvalidAddress(
                f"bytes [offset, offset + {length_name}) = [{offset}, {offset + length}) asked of "
                f"a buffer of {self.nbytes} bytes at {self.vaddr:#x}"
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
        self.check_live()
        raw = _bytes_of(data)
        pieces = [(k, o, raw[r : r + n]) for k, o, n, r in self._span(offset, raw.size, "len(data)")]
        for batch in progress.batches(pieces, "write", raw.size):
            self.put(batch)

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        """A new host uint8 array with global bytes ``[offset, offset + nbytes)``.
        (A large read on a terminal goes in batches behind a progress bar.)"""
        spans = list(self._span(offset, nbytes))
        out = np.empty(int(nbytes), dtype=np.uint8)
        for batch in progress.batches(spans, "read", nbytes):
            for (k, o, n, r), a in zip(batch, self.get([(k, o, n) for k, o, n, _ in batch])):
                out[r : r + n] = a
        return out

    # What the handle tells of its chunks is of a live buffer only.
    @property
    def chunks(self):
        self.check_live()
        return super().chunks

    def home(self, index: int) -> str:
        """The home worker of chunk ``index``."""
        self.check_live()
        return super().home(arguments.integer("index", index, 0, self.nchunks - 1))

    def homes(self) -> list[str]:
        self.check_live()
        return super().homes()

    def backends(self) -> set[str]:
        self.check_live()
        return super().backends()

    def by_home(self, indices=None) -> dict[str, list[int]]:
        self.check_live()
        if indices is not None:
            indices = arguments.integers("indices", indices, 0, self.nchunks - 1)
        return super().by_home(indices)

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


def _bytes_of(data) -> np.ndarray:
    """The bytes of ``data`` (bytes-like or an ndarray) as a flat uint8 array."""
    if getattr(data, "dtype", None) is not None and np.dtype(data.dtype).hasobject:
        raise InvalidArgumentType(f"data must hold bytes, not Python objects: got an array of {data.dtype}")
    if not isinstance(data, np.ndarray):
        try:
            memoryview(data)
        except TypeError:
            raise InvalidArgumentType(
                f"data must be bytes-like or an ndarray, got {arguments.shown(data)}") from None
    return np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), dtype=np.uint8)


def malloc(
    nbytes,
    chunk_bytes=None,
    placement: str | None = None,
    colocate=None,
    client: Client | None = None,
    replicas: int | None = None,
) -> GlobalBuffer:
    """Allocate ``nbytes`` of global device memory, zero-filled, cut into chunks.

    ``placement`` is ``"balanced"`` (default), ``"packed"`` or ``"round_robin"``;
    ``colocate=other`` puts chunk i where chunk i of ``other`` lives. ``replicas=k``
    keeps every chunk on k workers (the config's ``replicas``, 1, by default): each
    write completes once all k hold it, and a chunk whose home dies lives on in a copy.
    Raises ``dgvm.OutOfDeviceMemory`` when the cluster's free device memory cannot hold it.
    """
    nbytes = _positive_int("nbytes", nbytes)
    chunk = _positive_int("chunk_bytes", chunk_bytes if chunk_bytes is not None else config.get("chunk-bytes"))
    chunk = min(chunk, nbytes)
    request = dict(nbytes=nbytes, chunk_bytes=chunk, **placement_request(placement, colocate),
                   **replicas_request(replicas))
    return GlobalBuffer.create(client, **request)
