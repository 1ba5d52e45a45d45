"""Deferred elementwise results: chains of elementwise operations run as one pass.

``y = ((2 * x + 1) * x - 3) / (x + 2)`` makes five arrays in NumPy, and a pass over memory
(plus an allocation and a task per worker) for each. In dgvm.array an elementwise result
is *deferred*: the DArray knows its shape, dtype and chunks, and holds the expression tree
over the real arrays it reads, but has no memory yet. An elementwise operation on deferred
arrays inlines their trees. The first use that needs the values (a reduction, indexing,
``wait``, ``asnumpy``, a launch, ...) *materializes* it: one allocation, one task per
worker, one pass that reads the leaves and writes the result (``core.ArrayCore.materialize``, ``fused``).

Semantics stay eager: a write to an array (a launch, ``x[...] = v``, ``x += 1``,
``free``) first materializes the deferred results that read it, so they see the values
they were made from. Trees are bounded (``MAX_NODES``, ``MAX_INPUTS``) so that a long
loop such as ``x = x + 1`` materializes every few steps instead of growing without end.
Intermediates that are never used alone take no memory at all. A deferred array whose
values a reduction or an assignment computed without storing them is stored when it is
read again (``reread``): a result named and read across steps (``r`` in a solver, read by
``r @ r``, then by ``p = r + beta * p`` and the next ``r``) is computed once more, not by
every later reader in ever longer trees that keep each earlier step's arrays alive; a
temporary inlined into several trees (``t`` in ``t * (a + t * (b + t))``) still fuses.

A result whose values are already on the caller (a reduction, combined there) is deferred
too, as a *host value*: nothing is stored until a cluster operation needs it (then it is
written once), ``float()``/``asnumpy`` read it without a request, a 0-d one enters
elementwise trees as a constant, and elementwise operations on host values alone run on
the caller with NumPy. So ``alpha = rr / (p @ q)`` costs no device memory or task.

Here: the record (``Deferred``) and how trees are built from arrays (``leaf``).
An array keeps its own tree and its readers (``ArrayCore.defer``, ``undefer``,
``before_write``, ``materialize``); the arrays here are only asked.
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
    """What a deferred array will hold: ``expr`` (``trees``) over the real arrays
    ``inputs`` (leaves ``("in", i)``), named for its task keys. ``views[i]`` is None, or
    the ``views.View`` through which leaf i reads input i (``x.T``, ``x[::2]``)."""

    expr: tuple
    inputs: list
    name: str
    views: list = None
    nodes: int = field(default=1)
    # A host value: its values (a NumPy array) and the client of the cluster it belongs to.
    host: np.ndarray | None = None
    client: object = None
    # The deferred records inlined into this tree (weakly: a record holds its inputs), and
    # whether a reduction or an assignment computed its values without storing them
    # (``evaluated``, ``reread``).
    sources: list = field(default_factory=list)
    computed: bool = False

    def __post_init__(self):
        if self.views is None:
            self.views = [None] * len(self.inputs)


def reread(arrays) -> None:
    """Before an operation reads the trees of ``arrays``: each deferred one whose values
    were computed already (``evaluated``) is materialized now, so that they are computed
    no more. Host values and views are left as they are."""
    for a in arrays:
        d = a.deferred
        if d is not None and d.computed and d.host is None and a.alias is None:
            a.materialize()


def evaluated(d: "Deferred") -> None:
    """A reduction or an assignment computes the values of the tree ``d`` now, without
    storing them: its array, and the deferred arrays inlined into it (``r`` in ``r @ r``,
    whose tree is the temporary ``r * r``), are stored when they are read again
    (``reread``). (A tree that is materialized marks nothing: its own array is stored,
    and the temporaries inlined into it are rarely read again.)"""
    d.computed = True
    for ref in d.sources:
        s = ref()
        if s is not None:
            s.computed = True


def view_shape(a, view) -> tuple:
    return a.shape if view is None else view.shape


def _index(a, axes, inputs: list, views: list):
    for i, (b, v) in enumerate(zip(inputs, views)):
        if b is a and v == axes:
            return ("in", i)
    inputs.append(a)
    views.append(axes)
    return ("in", len(inputs) - 1)


def leaf(a, inputs: list, views: list, sources: list):
    """The tree for argument ``a`` of a new elementwise operation: a deferred array's own
    tree (its leaves renumbered into ``inputs``/``views``, its record and those inlined
    into it added to ``sources``) while small enough, else a leaf for the real array
    (materializing ``a`` first if it is deferred)."""
    d = a.deferred
    a.check_usable()  # a freed input raises now, not when the tree runs
    if d is not None and (d.host is None or a.ndim == 0):  # an n-d host value is stored first
        fresh = sum(
            1 for b, v in zip(d.inputs, d.views)
            if not any(b is c and v == w for c, w in zip(inputs, views))
        )
        if d.nodes < MAX_NODES and len(inputs) + fresh <= MAX_INPUTS:
            if d.host is None:
                sources.append(weakref.ref(d))
                sources.extend(d.sources)
            return _renumber(d.expr, d, inputs, views)
    if a.alias is not None:  # a view too large to inline: its values now, not later
        return _index(a.stored(), None, inputs, views)
    a.materialize()
    return _index(a, None, inputs, views)


def _renumber(expr, d: Deferred, inputs: list, views: list):
    kind = expr[0]
    if kind == "in":
        return _index(d.inputs[expr[1]], d.views[expr[1]], inputs, views)
    if kind == "const":
        return expr
    _, name, args, dtype = expr
    return ("call", name, [_renumber(e, d, inputs, views) for e in args], dtype)
