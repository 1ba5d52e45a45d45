"""Deferred elementwise results: chains of elementwise operations run as one pass.

``y = ((2 * x + 1) * x - 3) / (x + 2)`` makes five arrays in NumPy, and a pass over memory
(plus an allocation and a task per worker) for each. In dgvm.array an elementwise result
is *deferred*: the DArray knows its shape, dtype and chunks, and holds the expression tree
over the real arrays it reads, but has no memory yet. An elementwise operation on deferred
arrays inlines their trees. The first use that needs the values (a reduction, indexing,
``wait``, ``asnumpy``, a launch, ...) *materializes* it: one allocation, one task per
worker, one pass that reads the leaves and writes the result (see ``dgvm.array._engine.fused``).

Semantics stay eager: a write to an array (a launch, ``x[...] = v``, ``x += 1``,
``free``) first materializes the deferred results that read it, so they see the values
they were made from. Trees are bounded (``MAX_NODES``, ``MAX_INPUTS``) so that a long
loop such as ``x = x + 1`` materializes every few steps instead of growing without end.
Intermediates that are never used alone take no memory at all.

A result whose values are already on the caller (a reduction, combined there) is deferred
too, as a *host value*: nothing is stored until a cluster operation needs it (then it is
written once), ``float()``/``asnumpy`` read it without a request, a 0-d one enters
elementwise trees as a constant, and elementwise operations on host values alone run on
the caller with NumPy. So ``alpha = rr / (p @ q)`` costs no device memory or task.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

# A tree past these sizes is materialized before it is used again: kernels stay small
# to compile, and deferred arrays keep few input arrays alive.
MAX_NODES = 32
MAX_INPUTS = 8


@dataclass
class Deferred:
    """What a deferred DArray will hold: ``expr`` over the real DArrays ``inputs``
    (leaves ``("in", i)``), named for its task keys. ``views[i]`` is None, or the
    ``dgvm.array._engine.views.View`` through which leaf i reads input i (``x.T``, ``x[::2]``)."""

    expr: tuple
    inputs: list
    name: str
    views: list = None
    nodes: int = field(default=1)
    # A host value: its values (a NumPy array) and the client of the cluster it belongs to.
    host: np.ndarray | None = None
    client: object = None

    def __post_init__(self):
        if self.views is None:
            self.views = [None] * len(self.inputs)


def on_caller(value, client, name: str = "value"):
    """A deferred DArray holding the NumPy value ``value``, known on the caller."""
    from dgvm.protocol import chunk_grid
    from dgvm.array.darray import DArray

    value = np.asarray(value)
    out = DArray(None, value.shape, value.dtype, chunk_grid.normalize("auto", value.shape, value.dtype))
    hold(out, value, client, name)
    return out


def hold(x, value: np.ndarray, client, name: str = "value") -> None:
    """Make ``x`` (a DArray without memory, of ``value``'s shape) a host value."""
    undefer(x)
    expr = ("const", value[()]) if value.ndim == 0 else ("host",)
    defer(x, Deferred(expr, [], name, host=value, client=client))


def host_value(a) -> np.ndarray | None:
    """The caller's copy of ``a``'s values if ``a`` is a host value, else None."""
    d = a._deferred
    return None if d is None else d.host


def view_shape(a, view) -> tuple:
    return a.shape if view is None else view.shape


def view(x, v, name: str):
    """A deferred DArray reading ``x`` through the View ``v`` (no copy). A view of a
    view reads the first array through one View; other deferred ``x`` are computed."""
    from dgvm.array.darray import DArray

    d = x._deferred
    check_usable(x)  # a view of a freed array fails here, not at first use
    if 0 in v.shape:  # nothing to read: held on the caller (dgvm.array._engine.zero_size)
        from dgvm.array._engine import zero_size

        return zero_size.array(v.shape, x.dtype, x.client)
    if d is not None and d.expr[0] == "in":
        inner = d.views[d.expr[1]]
        x = d.inputs[d.expr[1]]
        v = inner.then(v) if inner is not None else v
    else:
        x._materialize_if_deferred()
    out = DArray(None, v.shape, x.dtype, v.chunks)
    defer(out, Deferred(("in", 0), [x], name, [v]))
    return out


def check_usable(a) -> None:
    """Raise now if ``a`` was freed (computed or not): trees must not read it later."""
    if a._deferred is None:
        a.alloc._check_live()  # DArray.alloc raises for one freed before it was computed


def nodes(expr) -> int:
    if expr[0] != "call":
        return 1
    return 1 + sum(nodes(a) for a in expr[2])


def _index(a, axes, inputs: list, views: list):
    for i, (b, v) in enumerate(zip(inputs, views)):
        if b is a and v == axes:
            return ("in", i)
    inputs.append(a)
    views.append(axes)
    return ("in", len(inputs) - 1)


def leaf(a, inputs: list, views: list):
    """The tree for argument ``a`` of a new elementwise operation: a deferred array's own
    tree (its leaves renumbered into ``inputs``/``views``) while small enough, else a
    leaf for the real array (materializing ``a`` first if it is deferred)."""
    d = a._deferred
    check_usable(a)  # a freed input raises now, not when the tree runs
    if d is not None and (d.host is None or a.ndim == 0):  # an n-d host value is stored first
        fresh = sum(
            1 for b, v in zip(d.inputs, d.views)
            if not any(b is c and v == w for c, w in zip(inputs, views))
        )
        if d.nodes < MAX_NODES and len(inputs) + fresh <= MAX_INPUTS:
            return _renumber(d.expr, d, inputs, views)
    a._materialize_if_deferred()
    return _index(a, None, inputs, views)


def _renumber(expr, d: Deferred, inputs: list, views: list):
    kind = expr[0]
    if kind == "in":
        return _index(d.inputs[expr[1]], d.views[expr[1]], inputs, views)
    if kind == "const":
        return expr
    _, name, args, dtype = expr
    return ("call", name, [_renumber(e, d, inputs, views) for e in args], dtype)


def defer(x, deferred: Deferred) -> None:
    """Make ``x`` (a DArray without memory) stand for ``deferred``, and note it as a reader
    of each input so that a write to one materializes it first."""
    deferred.nodes = nodes(deferred.expr)
    x._deferred = deferred
    key = id(x)
    for a in deferred.inputs:
        # The entry goes with its reader (a result only reduced, or dropped, is never
        # computed: without this, an array only read would collect dead entries).
        readers = a._readers
        readers[key] = weakref.ref(x, lambda r, readers=readers, key=key: readers.get(key) is r and readers.pop(key))


def undefer(x) -> Deferred | None:
    """Take the deferred tree off ``x`` (to run it, or to drop it)."""
    d = x._deferred
    x._deferred = None
    if d is not None:
        for a in d.inputs:
            a._readers.pop(id(x), None)
    return d


def materialize_readers(x) -> None:
    """Before ``x`` is written or freed: run the deferred results that read it."""
    for ref in list(x._readers.values()):
        reader = ref()
        if reader is not None:
            reader._materialize_if_deferred()
    x._readers.clear()
