"""Lineage: an array that lost chunks is made again by the operation that made it.

A worker that dies takes the chunks homed only there with it (``replicas=k`` arrays keep
copies elsewhere). An array made by an operation records how to make it again
(``Lineage``): the operation's picklable op (``blockwise``), its name, and its input
arrays; one zero-filled at allocation records just that. When an operation or a read of
the array meets its lost chunks, the array is computed again, whole, into a new
allocation (``ArrayCore.recompute``): it and its views read that from then on, the
damaged allocation is freed, and the caller's operation goes on.

Inputs are held *weakly* (``Input``): a result does not keep the memory of what it was
made from alive, as a NumPy result would not. With each input the record keeps the
input's own lineage (a few levels deep, ``MAX_DEPTH``): an input freed or collected since,
or written since (its values changed), is made again from that; one that lost chunks is
recovered first, the same way. The lineage ends where neither is left: an input made
from host data and gone, or deeper than ``MAX_DEPTH`` and gone.

An array's own lineage ends at any write into it after it was made (``before_write``:
``x[...] = v`` also through views, ``out=``, ``x += y``, ``dgvm.launch(..., out=x)``, a
fill from the host) and at a write to its allocation that passes the array by
(``AllocationHandle.writes``: ``put``, ``map_chunks``). Arrays made from host data
(``from_numpy``, ``asarray`` of host values, ``from_dask``, a host value stored) have
none: the ``ChunkLost`` a use of their lost chunks raises says so.

Here: the records, the check for lost chunks (``damaged``: cheap until a worker left,
``Departures``), and ``recover``/``retrying`` that the engine's reads and operations
call. The arrays are asked through their methods (``ArrayCore``); the blockwise runner
is handed in with each record (``Lineage.run``), never imported.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dgvm.client import failures
from dgvm.client.left_workers import LeftWorkers
from dgvm.protocol.errors import ChunkLost

# Levels of inputs' lineage a record keeps for inputs that are gone: a loop ``x = f(x)``
# keeps a bounded chain of small records, never one per step.
MAX_DEPTH = 8
# Times a read or reduction is tried again after recovering what it read.
RETRIES = 3


class Ended(Exception):
    """An array cannot be made again; ``str()`` says why."""


class Departures:
    """A session part: how many workers left since it began (arrays note the count at
    which they were last found whole, and look again only once it moved)."""

    def __init__(self, session):
        self.count = 0
        session.part(LeftWorkers).on_left(self._left)

    def _left(self, address) -> None:
        self.count += 1


def departures_of(alloc) -> Departures:
    """The ``Departures`` of the session of the allocation handle ``alloc``."""
    return alloc.session.part(Departures)


@dataclass(eq=False)
class Input:
    """An input array of an operation, held weakly, with its write count then and its
    own lineage then (None: none, or past ``MAX_DEPTH``)."""

    ref: weakref.ref
    writes: int
    lineage: "Lineage | None"

    @classmethod
    def of(cls, a) -> "Input":
        lin = a.lineage
        if lin is not None and lin.depth >= MAX_DEPTH:
            lin = None
        return cls(weakref.ref(a), a.write_count, lin)

    def get(self):
        """The input's values as the operation read them: the array itself while it is
        stored and unwritten (recovered first if it lost chunks), else a new array made
        from its lineage. Raises ``Ended``."""
        a = self.ref()
        if a is not None and a.is_stored and a.write_count == self.writes:
            if damaged(a, force=True):
                try:
                    a.recompute()
                except Ended as e:
                    raise Ended(f"an array it was made from lost chunks: {a.loss_note(str(e))}") from None
            return a
        if self.lineage is None:
            why = "freed" if a is None or not a.is_stored else "written since"
            raise Ended(f"an array it was made from was {why}, and that one has no lineage")
        out = self.lineage.make()
        out.wait()
        return out


@dataclass(eq=False)
class Lineage:
    """How an array was made: ``run(op, out, inputs, name)`` into a new array of this
    shape, dtype and chunks (``blockwise.run``), from ``inputs``."""

    op: object
    name: str
    inputs: list
    run: Callable
    shape: tuple
    dtype: np.dtype
    chunks: tuple
    cls: type
    client: object
    depth: int = field(default=1)

    @classmethod
    def of_run(cls, run, op, out, inputs, name: str) -> "Lineage":
        held = [Input.of(a) for a in inputs]
        depth = 1 + max((i.lineage.depth for i in held if i.lineage is not None), default=0)
        return cls(op, name, held, run, out.shape, out.dtype, out.chunks, type(out), out.client, depth)

    def make(self):
        """A new array of the same values, its tasks submitted (raises ``Ended``)."""
        inputs = [i.get() for i in self.inputs]
        # Placed with its first input where they share a grid, as operations place results.
        near = next((a for a in inputs if a.chunks == self.chunks), None)
        out = self.cls.allocated(self.shape, self.dtype, self.chunks, colocate=near, client=self.client,
                                 zero=False)
        self.run(self.op, out, inputs, self.name)
        return out


@dataclass(eq=False)
class Zeros(Lineage):
    """An array zero-filled when allocated (``zeros``), not written since."""

    @classmethod
    def of_layout(cls, x) -> "Zeros":
        return cls(None, "zeros", [], None, x.shape, x.dtype, x.chunks, type(x), x.client)

    def make(self):
        return self.cls.allocated(self.shape, self.dtype, self.chunks, client=self.client)


# -- finding lost chunks ----------------------------------------------------------------------
def damaged(a, force: bool = False) -> bool:
    """Whether the stored array ``a`` lost chunks (their home left with no copy), or its
    values were never made (the tasks that filled it failed with ``ChunkLost``). Asks the
    GVAT only once a worker left since ``a`` was last found whole, or with ``force``."""
    alloc = a.stored_alloc
    if alloc is None:
        return False
    count = departures_of(alloc).count
    if not force and a.whole_at == count:
        return False
    if force:
        alloc.refresh()
    else:
        alloc.ensure_fresh()
    lost = any(c.tier == "lost" for c in alloc.chunks) or any(_failed_fill(f) for f in alloc.pending.writes)
    if not lost:
        a.whole_at = count
    return lost


def _failed_fill(future) -> bool:
    if future.status != "error":
        return False
    op = failures.operation(future)
    return op is not None and op.fill and isinstance(future.exception(), ChunkLost)


def _stored_parts(arrays):
    """The stored arrays whose chunks ``arrays`` read: themselves, a view's base (a view's
    copy of its values is yielded as ``(view, copy)``), a deferred tree's inputs."""
    seen = set()
    stack = list(arrays)
    while stack:
        a = stack.pop()
        if id(a) in seen:
            continue
        seen.add(id(a))
        alias = a.alias
        if alias is not None:
            stack.append(alias.base)
            if alias.source is not None:
                stack.append(alias.source)
            copy = a.kept_copy
            if copy is not None:
                yield (a, copy)
            continue
        d = a.deferred
        if d is not None:
            stack.extend(d.inputs)
            continue
        yield a


def recover(arrays, force: bool = False) -> tuple[bool, list[str]]:
    """Make again, from their lineage, the arrays among those ``arrays`` read that lost
    chunks (``_stored_parts``); a view's copy that lost chunks is dropped (made again from
    its base when next needed). Returns (whether any was, what the others are: one line
    each for a ``ChunkLost`` message)."""
    did, notes = False, []
    for part in _stored_parts(arrays):
        if isinstance(part, tuple):
            view, copy = part
            if copy.is_stored and damaged(copy, force):
                view.forget_copy()
                did = True
            continue
        if not damaged(part, force):
            continue
        try:
            part.recompute()
            did = True
        except Ended as e:
            notes.append(part.loss_note(str(e)))
    return did, notes


def retrying(arrays, action: Callable):
    """``action()`` (a read or a reduction of ``arrays``), after recovering what they read;
    on ``ChunkLost`` (a worker left meanwhile, before this process heard), recovered and
    run again. A ``ChunkLost`` no lineage can mend names the arrays that have none."""
    recover(arrays)
    for attempt in range(RETRIES):
        try:
            return action()
        except ChunkLost as e:
            did, notes = recover(arrays, force=True)
            if notes or not did or attempt == RETRIES - 1:
                text = str(e)  # (a nested read may have named them already)
                text = "; ".join([text, *(n for n in notes if n not in text)])
            else:
                continue
        # Raised here, not in the handler: the new error holds none of the old one's frames.
        raise ChunkLost(text)
