"""``ArrayCore``: what a DArray is and holds, under everything that makes or uses one.

An array's blocks are the chunks of one GVAT allocation; or, before its values are
needed, a deferred tree over other arrays (``deferred``) or a value held on the caller
(a host value). Here: that state and everything done to it (the tree taken on and off,
its readers, computing it, the allocation's life, reads and writes from the caller),
and the constructors of new arrays.

The class users see is ``dgvm.array.DArray`` (``dgvm/array/array_object.py``): this one
with its Python face (operators, indexing, NumPy's methods, the protocols), which call
the functions of ``dgvm.array``. Those functions, and the engine under them, make their
results of the class of the arrays they are given (``type(x).allocated(...)``,
``type(x).on_caller(...)``, ``type(x).of_deferred(...)``), so nothing under DArray names
it: only functions that make arrays from nothing (creation, ``from_numpy``, random)
name DArray itself. Code outside this class uses these methods, never its attributes
with a leading underscore.
"""

from __future__ import annotations

import math
import weakref

import numpy as np
from dgvm.client.direct import wait as wait_tasks

from dgvm.array._engine import blockwise, lineage
from dgvm.array._engine.allocation import NoElements, allocate
from dgvm.array._engine.axes import normalize_shape
from dgvm.array._engine.clients import client_for
from dgvm.array._engine.aliases import Alias
from dgvm.array._engine.deferred import Deferred
from dgvm.array._engine.dtypes import check
from dgvm.array._engine.lifecycle import release_when_unreachable, releases_of
from dgvm.array._engine.small_reads import read_view
from dgvm.array._engine.tree_op import Elementwise, result_placement
from dgvm.array._engine.trees import nodes
from dgvm import config
from dgvm.client import failures, progress
from dgvm.client.allocation import AllocationHandle
from dgvm.client.dispatch import wait_raising
from dgvm.client.pending import Pending
from dgvm.protocol import chunk_grid
from dgvm.protocol.errors import DgvmError


class ArrayCore:
    """A distributed array in global device memory (see ``dgvm.array.DArray``).

    Block k (C order over the chunk grid) is chunk k of ``alloc``, stored contiguously
    in C order on its home worker. ``x.vaddr`` is the array's first global address.
    Its memory is freed with ``free()``, at the end of a ``with`` block, or when the
    last reference to it goes away (after the operations that use it).

    An elementwise result starts *deferred* (``deferred``): it has a shape, dtype and
    chunks but no allocation until something needs its values; touching ``alloc``
    materializes it.

    An array an operation wrote whole keeps how to make it again (``lineage``) until it is
    written: reads and operations that meet its lost chunks compute it again (``recompute``).
    """

    def __init__(self, alloc: AllocationHandle | None, shape, dtype, chunks):
        if type(self) is ArrayCore:  # it has no operators: arrays are DArrays
            raise TypeError("ArrayCore is the core of dgvm.array.DArray; make a DArray")
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.chunks = tuple(tuple(int(b) for b in axis) for axis in chunks)
        self._deferred = None
        # Deferred arrays that read this one: a write materializes them first.
        self._readers: dict = {}
        self._alloc = None
        # A view: the array whose memory it shares, and how (``aliases``); its copy for
        # operations that need stored chunks, with the base's write count it was made at.
        self._alias: Alias | None = None
        self._snapshot: tuple | None = None
        # Writes begun on this array (``before_write``): views' copies older than that are stale.
        self._writes = 0
        # How to make it again if its chunks are lost (``lineage``), the count of writes to
        # its allocation that passed it by when that was recorded, and why there is none.
        self._lineage: lineage.Lineage | None = None
        self._lineage_at = 0
        self._no_lineage: str | None = None
        self._whole_at = 0  # the session's departures when it was last found whole
        if alloc is not None:
            self._adopt(alloc)

    # -- new arrays of this class ------------------------------------------------------------
    @classmethod
    def allocated(cls, shape, dtype=None, chunks="auto", placement=None, colocate=None, client=None,
                  zero=True, replicas=None):
        """A new array in global device memory, zero-filled unless ``zero=False`` (an
        operation's result, which its task writes whole), with ``replicas`` copies of
        each chunk (``dgvm.malloc``'s). A shape with a zero in it has nothing to place:
        that array is held on the caller (``zero_size``)."""
        shape = normalize_shape(shape)
        dtype = check(np.float64 if dtype is None else dtype)
        grid = chunk_grid.normalize(chunks, shape, dtype, max_blocks=int(config.get("max-chunks")))
        if math.prod(shape) == 0:
            return cls.empty_on_caller(shape, dtype, client_for(client))
        x = cls(allocate(shape, dtype, grid, placement, colocate, client, zero, replicas), shape, dtype, grid)
        if zero:  # zeros until written: made again as zeros
            x.made_by(lineage.Zeros.of_layout(x))
        return x

    @classmethod
    def from_host(cls, value, chunks="auto", placement=None, colocate=None, client=None, replicas=None):
        """A new array holding a copy of the host array ``value``, cut into ``chunks``."""
        value = np.asarray(value)
        x = cls.allocated(value.shape, value.dtype, chunks, placement, colocate, client, replicas=replicas)
        if x.size == 0:
            return x
        try:
            x.write_blocks(value)
        except BaseException:
            x.free()
            raise
        x.made_from_host()
        return x

    @classmethod
    def on_caller(cls, value, client, name: str = "value"):
        """A host value: an array whose values (``value``) stay on the caller until a
        cluster operation needs them (``deferred``), of ``client``'s cluster."""
        value = np.asarray(value)
        out = cls(None, value.shape, value.dtype, chunk_grid.auto(value.shape, value.dtype))
        out.hold(value, client, name)
        return out

    @classmethod
    def empty_on_caller(cls, shape, dtype, client):
        """An array with no elements (a zero in ``shape``), held on the caller."""
        return cls.on_caller(np.empty(tuple(int(s) for s in shape), dtype=dtype), client, "empty")

    @classmethod
    def of_deferred(cls, shape, dtype, chunks, tree: Deferred):
        """A deferred array standing for ``tree``."""
        out = cls(None, shape, dtype, chunks)
        out.defer(tree)
        return out

    @classmethod
    def aliasing(cls, alias: Alias, shape, dtype, chunks, name: str):
        """A view (``aliases``): an array sharing the memory of ``alias.base``. A strided
        view reads its base in place as a one-leaf deferred tree (which is never computed
        into memory of its own, and is no reader of the base: it follows its writes)."""
        out = cls(None, shape, dtype, chunks)
        out._alias = alias
        if alias.view is not None:
            out._deferred = Deferred(("in", 0), [alias.base], name, [alias.view])
        return out

    # -- views -------------------------------------------------------------------------------------
    @property
    def alias(self) -> Alias | None:
        """How this array shares another's memory (None: it owns its values)."""
        return self._alias

    @property
    def base(self):
        """NumPy's ``base``: the array whose memory this view shares (None if it owns its
        memory)."""
        return None if self._alias is None else self._alias.base

    def stored(self) -> "ArrayCore":
        """The array whose allocation holds these values now: this one (computed if
        deferred), or for a view a copy of its elements, made once per state of its base
        (operations that need stored chunks read that; writes go through ``view_writes``)."""
        a = self._alias
        if a is None:
            self.alloc
            return self
        a.base.check_usable()
        root = a.root
        snap = self._snapshot
        if snap is None or snap[1] != root._writes or (snap[0]._alloc is not None and snap[0]._alloc.freed):
            self._snapshot = snap = (a.copy_of(self), root._writes)
        snap[0].alloc  # computed now, before any later write to the base
        return snap[0]

    def keep_copy(self, copy) -> None:
        """Keep ``copy`` (a new array of this view's present values) as its copy."""
        self._snapshot = (copy, self._alias.root._writes)

    # -- the deferred tree ---------------------------------------------------------------------
    @property
    def deferred(self) -> Deferred | None:
        """The tree this array stands for until it is computed (None once it is)."""
        return self._deferred

    @property
    def host_value(self) -> np.ndarray | None:
        """The caller's copy of the values if this array is a host value, else None."""
        d = self._deferred
        return None if d is None else d.host

    @property
    def is_stored(self) -> bool:
        """Whether the values are in an allocation that is not freed (nothing to compute)."""
        return self._alloc is not None and not self._alloc.freed

    def defer(self, tree: Deferred) -> None:
        """Stand for ``tree`` (this array has no memory), noted as a reader of each of its
        inputs so that a write to one computes this array first."""
        tree.nodes = nodes(tree.expr)
        self._deferred = tree
        key = id(self)
        for a in tree.inputs:
            # The entry goes with its reader (a result only reduced, or dropped, is never
            # computed: without this, an array only read would collect dead entries).
            readers = a._readers
            readers[key] = weakref.ref(
                self, lambda r, readers=readers, key=key: readers.get(key) is r and readers.pop(key))

    def undefer(self) -> Deferred | None:
        """Take the tree off this array (to run it, or to drop it)."""
        d = self._deferred
        self._deferred = None
        if d is not None:
            for a in d.inputs:
                a._readers.pop(id(self), None)
        return d

    def hold(self, value: np.ndarray, client, name: str = "value") -> None:
        """Be the host value ``value`` (of this array's shape) from now on."""
        self.undefer()
        expr = ("const", value[()]) if value.ndim == 0 else ("host",)
        self.defer(Deferred(expr, [], name, host=value, client=client))

    def readers(self) -> list:
        """The deferred arrays that read this one's present values."""
        return [r for r in (ref() for ref in list(self._readers.values())) if r is not None]

    def before_write(self) -> None:
        """Deferred results made from this array's present values are computed first (a
        view's: its base's). Views' copies of the old values are stale from now on."""
        if self._alias is not None:
            if self._alias.readonly:
                raise ValueError("assignment destination is read-only")
            self._alias.base.before_write()
            return
        self._writes += 1
        if self._lineage is not None:  # made again, it would miss this write
            self._lineage = None
            self._no_lineage = "written after it was made"
        if self._readers:
            for reader in self.readers():
                reader.materialize()
            self._readers.clear()

    def check_usable(self) -> None:
        """Raise now if this array was freed (computed or not): trees must not read it later."""
        if self._alias is not None:
            self._alias.base.check_usable()
        elif self._deferred is None:
            self.alloc.check_live()  # ``alloc`` raises for one freed before it was computed

    def materialize(self) -> None:
        """Compute a deferred array now: allocate it (colocated with a leaf of its shape
        and chunks) and run its whole tree in one pass, one task per worker; a host value
        is written from the caller. Not zero-filled: every element is written next."""
        d = self._deferred
        if d is None or self._alias is not None:  # a view's values are its base's
            return
        if self.size == 0:  # an empty host value: it has no allocation
            raise NoElements(self.shape, self.dtype, d.client, type(self))
        if d.host is not None:
            alloc = allocate(self.shape, self.dtype, self.chunks, client=d.client, zero=False)
            self._fill(d, alloc, lambda: self.write_blocks(d.host))
            self.made_from_host()  # its values were on the caller, and are no longer
            return
        op = Elementwise.of(d.expr, d.inputs, d.views, self.shape)
        for a in d.inputs:
            a.check_usable()  # freed meanwhile: raises before anything is allocated
        alloc = allocate(self.shape, self.dtype, self.chunks, colocate=result_placement(self, d),
                         client=self.client, zero=False)
        name = d.name if d.nodes == 1 else f"fused{d.nodes}-{d.name}"
        self._fill(d, alloc, lambda: blockwise.run(op, self, d.inputs, name))

    def _fill(self, d: Deferred, alloc: AllocationHandle, write) -> None:
        """Take ``alloc`` and ``write()`` it full. Nothing half-made: on failure the
        memory goes back and this array is deferred again."""
        self.undefer()
        self._adopt(alloc)
        try:
            write()
            failures.fill(alloc.pending.writes)  # if they fail, this result has no values
        except BaseException:
            self._alloc = None
            after = alloc.pending.all()  # a reused allocation: tasks may still run on it
            if after:
                releases_of(alloc.client).free_later(alloc, after)
            else:
                alloc.free()
            self.defer(d)
            raise

    # -- the allocation ------------------------------------------------------------------------
    def _adopt(self, alloc: AllocationHandle) -> None:
        self._alloc = alloc  # its pending tasks order the next ones (dgvm.client.dispatch)
        self._whole_at = lineage.departures_of(alloc).count
        release_when_unreachable(self, alloc)

    # -- lineage (``lineage``) ---------------------------------------------------------------------
    @property
    def lineage(self) -> "lineage.Lineage | None":
        """How this array was made, to make it again if it loses chunks (None: it has none)."""
        return self._lineage

    @property
    def write_count(self) -> int:
        """Writes begun on this array so far (and frees), and on its allocation past the
        array (``put``, ``map_chunks``): an operation's input notes it."""
        root = self._alias.root if self._alias is not None else self
        alloc = root._alloc
        return self._writes + (alloc.writes if alloc is not None else 0)

    @property
    def fresh(self) -> bool:
        """Whether nothing was ever written into this array (an operation's result-to-be)."""
        return self._writes == 0

    @property
    def stored_alloc(self) -> AllocationHandle | None:
        """The allocation holding this array's values if it is stored and not freed (no
        view, nothing computed), else None."""
        a = self._alloc
        return a if self._alias is None and a is not None and not a.freed else None

    @property
    def whole_at(self) -> int:
        """The session's departure count when this array was last found to have all its chunks."""
        return self._whole_at

    @whole_at.setter
    def whole_at(self, count: int) -> None:
        self._whole_at = count

    @property
    def kept_copy(self):
        """A view's copy of its values (``stored``), or None."""
        return None if self._snapshot is None else self._snapshot[0]

    def forget_copy(self) -> None:
        """Drop a view's copy of its values (it lost chunks): made again when next needed."""
        self._snapshot = None

    def made_by(self, record: "lineage.Lineage") -> None:
        """This array's values are what ``record`` makes (an operation just wrote it whole)."""
        self._lineage, self._no_lineage = record, None
        self._lineage_at = self._alloc.writes if self._alloc is not None else 0

    def made_from_host(self) -> None:
        """This array's values came from the caller: nothing can make them again."""
        self._lineage, self._no_lineage = None, "made from host data"

    def recompute(self) -> None:
        """Make this array's values again from its lineage into a new allocation (it lost
        chunks), which it and its views use from now on; the damaged one is freed.
        Raises ``lineage.Ended`` if it has no lineage, or its lineage ended."""
        record = self._lineage
        if record is None:
            raise lineage.Ended(self._no_lineage or "made without a recorded operation")
        if self._alloc.writes != self._lineage_at:
            self._lineage, self._no_lineage = None, "written through its allocation after it was made"
            raise lineage.Ended(self._no_lineage)
        new = record.make()
        new.wait()
        damaged, heir = self._alloc, new._alloc.hand_over()  # new counts as freed from now on
        self._adopt(heir)
        self._lineage_at = heir.writes
        # (Views' copies of the old values hold the same values: those that lost chunks
        # are dropped by ``lineage.recover``.)
        releases_of(damaged.client).free_later(damaged, damaged.pending.take())

    def loss_note(self, why: str) -> str:
        """What a ``ChunkLost`` says of this array, which cannot be made again (``why``)."""
        what = f"allocation {self._alloc.alloc_id} (a {self.shape} {self.dtype} DArray"
        if why == "made from host data":
            return f"{what} made from host data without replicas: no copy and no lineage)"
        return f"{what} without replicas: no copy, and no lineage: {why})"

    @property
    def alloc(self) -> AllocationHandle:
        """The GVAT allocation behind the array (made now if the array is deferred; a
        view's copy, ``stored``)."""
        if self._alias is not None:
            return self.stored().alloc
        if self._alloc is None:
            self.materialize()
            if self._alloc is None:
                raise DgvmError(f"this {self.shape} {self.dtype} DArray was freed before it was computed")
        return self._alloc

    @property
    def client(self):
        """The Dask client of the array's cluster (known without computing a deferred array)."""
        if self._alias is not None:
            return self._alias.base.client
        d = self._deferred
        if self._alloc is None and d is not None:
            return d.client or d.inputs[0].client  # a host value has no inputs
        return self.alloc.client

    @property
    def pending(self) -> Pending:
        """The tasks that write this array and those that read it since (made now if
        the array is deferred)."""
        return self.alloc.pending

    # -- metadata --------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def numblocks(self) -> tuple[int, ...]:
        return chunk_grid.grid_shape(self.chunks)

    @property
    def vaddr(self) -> int:
        return self.alloc.vaddr

    @property
    def alloc_id(self) -> int:
        return self.alloc.alloc_id

    # -- life cycle ------------------------------------------------------------------------------
    def settle(self) -> None:
        """Let every pending launch that writes or reads this array finish."""
        if self._alias is not None:
            return self._alias.base.settle()
        if self.host_value is not None:
            return  # held on the caller: nothing runs on it
        pending = self.pending.all()
        if pending:
            wait_tasks(pending)

    def persist(self, replicas: int | None = None):
        """Start computing the array now and return at once (``wait`` also waits).

        A deferred elementwise result runs when its values are first needed. A loop that
        makes several results before it looks at any calls ``persist()`` on each, so their
        tasks queue on the workers back to back instead of each waiting for a round trip.

        ``replicas=k``: keep every chunk on k workers from now on (a view: its base's). This
        waits for the array's values and for the new copies; each later write completes
        once all k hold it, and a chunk whose home dies lives on in a copy."""
        if self._alias is not None:
            self._alias.base.persist(replicas)
        elif self.host_value is None:
            self.alloc  # a deferred result is materialized: its tasks are submitted, not awaited
            if replicas is not None:
                self.wait()
                self.alloc.set_replicas(replicas)
        return self

    def wait(self):
        """Block until every launch writing this array has finished; raise the first
        error as soon as one fails (once: the array is usable after it,
        ``dgvm.client.failures``)."""
        if self._alias is not None:
            self._alias.base.wait()
            return self
        if self.host_value is not None:
            return self  # its values are on the caller already, or it has none
        self.alloc  # a deferred one is computed first
        lineage.retrying([self], lambda: wait_raising(self.pending.writes))
        return self

    def free(self) -> None:
        """Give the array's device memory back now (also done when it becomes unreachable).

        Deferred results made from its values (``y = x + 1``, ``x[::2] * 2``) keep
        reading them, as NumPy's results would: the memory then goes back once they are
        computed or dropped. So freeing needs no memory, and never fails for lack of it.
        A view gives back only its own copy, never its base's memory, and is unusable after."""
        if self._alias is not None:
            self._alias = self._snapshot = self._deferred = None
            return
        if self._alloc is None:  # deferred: nothing computed, nothing to give back
            self.undefer()
            return
        self._writes += 1  # views' copies of its values go stale with it
        readers = self.readers()
        if readers and not self._alloc.freed:
            # The readers take over the memory through an array of their own; this one
            # is freed (its handle says so) and keeps nothing alive.
            heir = type(self)(None, self.shape, self.dtype, self.chunks)
            heir._adopt(self._alloc.hand_over())
            heir._lineage, heir._lineage_at, heir._no_lineage = self._lineage, self._lineage_at, self._no_lineage
            for r in readers:
                d = r.undefer()
                d.inputs = [heir if a is self else a for a in d.inputs]
                r.defer(d)
            self._readers.clear()
            return
        self._readers.clear()
        # Launches that use the memory finish first (their errors belong to wait).
        self.settle()
        self.pending.take()
        self.alloc.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._alias is not None or self._alloc is None or not self._alloc.freed:
            self.free()

    def __repr__(self):
        if self._alias is not None:
            return (f"dgvm.DArray<shape={self.shape}, dtype={self.dtype}, "
                    f"numblocks={self.numblocks}, view of {self._alias.base.describe_short()}>")
        if self._alloc is None:
            return (f"dgvm.DArray<shape={self.shape}, dtype={self.dtype}, "
                    f"numblocks={self.numblocks}, deferred>")
        return (
            f"dgvm.DArray<shape={self.shape}, dtype={self.dtype}, numblocks={self.numblocks}, "
            f"vaddr={self.vaddr:#x}>"
        )

    def describe_short(self) -> str:
        state = "deferred" if self._alloc is None else f"vaddr={self._alloc.vaddr:#x}"
        return f"<shape={self.shape}, dtype={self.dtype}, {state}>"

    # -- host round trip -------------------------------------------------------------------------
    def write_blocks(self, source: np.ndarray) -> None:
        """Copy a host array of this shape into the blocks, one request per worker."""
        self.before_write()
        wait_raising(self.pending.writes)
        wait_tasks(self.pending.readers())  # their errors are theirs
        pieces = []
        for k, sl in enumerate(chunk_grid.block_slices(self.chunks)):
            block = np.ascontiguousarray(source[sl], dtype=self.dtype)
            pieces.append((k, 0, block.reshape(-1).view(np.uint8)))
        for batch in progress.batches(pieces, "write", self.nbytes):  # a bar on a terminal
            self.alloc.put(batch)

    def to_numpy(self) -> np.ndarray:
        """The values, gathered into a new NumPy array on the caller."""
        if self.host_value is not None:
            return self.host_value.copy()
        # Chunks lost on the way: made again from the lineage of what it reads, and read again.
        return lineage.retrying([self], self._read)

    def _read(self) -> np.ndarray:
        small = read_view(self)  # x[i, j]: read in place, nothing computed
        if small is not None:
            return small
        if self._alias is not None:
            return self.stored().to_numpy()
        self.wait()
        out = np.empty(self.shape, dtype=self.dtype)
        slices = chunk_grid.block_slices(self.chunks)
        sizes = np.diff(self.alloc.offsets)
        wanted = list(zip(slices, [(k, 0, int(n)) for k, n in enumerate(sizes)]))
        for batch in progress.batches(wanted, "read", self.nbytes):  # a bar on a terminal
            for (sl, _), raw in zip(batch, self.alloc.get([piece for _, piece in batch])):
                shape = tuple(s.stop - s.start for s in sl)
                out[sl] = raw.view(self.dtype).reshape(shape)
        return out

    def item(self):
        """The value of a one-element array as a Python scalar."""
        if self.size != 1:
            raise ValueError(f"item() needs an array of one element; this one has shape {self.shape}")
        return self.to_numpy().reshape(-1)[0].item()
