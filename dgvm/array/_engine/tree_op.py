"""``Elementwise``: the blockwise op that runs an expression tree (``trees``) per chunk.

A deferred result (``deferred``) is computed by one of these: each output chunk reads
the regions of its leaves that broadcast onto it (through a leaf's ``View`` where it has
one: ``x.T``, ``x[::2]``) and writes the tree's value straight into the chunk, in one
pass where it can (``fused``). ``result_placement`` says where such a result's chunks
go, so that they read their leaves locally.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine import fused, special_values
from dgvm.array._engine.axes import broadcast_region
from dgvm.array._engine.placement import picks_near
from dgvm.array._engine.trees import CLASSIC, NOT_UFUNCS, evaluate
from dgvm.backends import working_memory

# Bytes per element a temporary of a tree's evaluation may take (complex128, the widest).
TEMPORARY_ITEMSIZE = 16
# An output chunk is cut into at most this many parts so that each leaf reads each part
# from one chunk of its input (``Elementwise.boxes``); beyond, leaves are gathered.
MAX_BOXES = 27


@dataclass
class Reads:
    """What a task body gives an op to read its inputs with: ``reads(i, lo, hi)`` is
    elements ``[lo, hi)`` of input ``first + i`` (a view of a chunk where one holds them);
    ``edges(i, a)`` that input's block starts along axis ``a``, its length last."""

    read: object  # (i, lo, hi) -> array
    specs: list  # the inputs' ArraySpecs
    first: int = 0
    ahead: object = None  # (i, lo, hi) -> None: start reading what ``read`` will read later

    def __call__(self, i, lo, hi):
        return self.read(self.first + i, lo, hi)

    def edges(self, i: int, a: int) -> list:
        return self.specs[self.first + i].edges(a)

    def prefetch(self, i, lo, hi) -> None:
        if self.ahead is not None:
            self.ahead(self.first + i, lo, hi)

    def after(self, k: int) -> "Reads":
        """The inputs from ``k`` on, numbered from 0 (a tree's inputs after an op's own)."""
        return Reads(self.read, self.specs, self.first + k, self.ahead)


@dataclass
class Elementwise:
    """Blockwise op: an expression over broadcast inputs; leaf i has shape ``shapes[i]``
    and reads its input through the View ``views[i]`` (None: as it is)."""

    expr: tuple
    shapes: list
    shape: tuple
    views: list = None

    @classmethod
    def of(cls, expr, inputs, views, shape):
        shapes = [a.shape if v is None else v.shape for a, v in zip(inputs, views)]
        return cls(expr, shapes, shape, list(views))

    @property
    def aligned(self) -> bool:
        """Every input is read as it is, without broadcasting: output elements
        ``[lo, hi)`` read the same elements of each input."""
        return all(v is None for v in (self.views or [])) and all(tuple(s) == tuple(self.shape) for s in self.shapes)

    def region(self, i: int, lo, hi):
        """The region of input ``i`` that broadcasts onto output elements ``[lo, hi)``,
        in the input's own axis order."""
        rlo, rhi = broadcast_region(self.shapes[i], lo, hi)
        view = self.views[i] if self.views else None
        return (rlo, rhi) if view is None else view.region(rlo, rhi)

    def __getstate__(self):  # the stripped tree is made where it is used
        return {k: v for k, v in self.__dict__.items() if k != "stripped"}

    @functools.cached_property
    def stripped(self) -> tuple:
        """``fused.strip(self.expr)``, made once per op: a task runs it over each of its chunks."""
        return fused.strip(self.expr)

    def leaves(self, read, lo, hi, xp) -> list:
        out = []
        for i in range(len(self.shapes)):
            value = read(i, *self.region(i, lo, hi))
            view = self.views[i] if self.views else None
            out.append(value if view is None else view.apply(value))
        return out

    def block(self, read, lo, hi, xp):
        return self.value(self.leaves(read, lo, hi, xp), xp)

    def block_into(self, read, lo, hi, xp, target) -> bool:
        """Write the chunk straight into ``target`` (no temporary); False when the tree
        cannot (the caller then copies ``block``'s value in)."""
        if not self.writes_into(target):
            return False
        self.into(read, lo, hi, xp, target)
        return True

    def into(self, read, lo, hi, xp, target) -> None:
        """The tree's values at elements ``[lo, hi)`` written into ``target`` (of their
        shape and the tree's dtype), part by part (``boxes``) where ``read`` says where
        its inputs' blocks end (a ``Reads``): each leaf of a part is a view of one chunk
        or a piece read from a neighbour, never a gathered copy of the region."""
        parts = self.boxes(lo, hi, read.edges) if len(lo) else [(lo, hi)]
        if len(parts) > 1:  # the neighbours' pieces asked for together, before the first part runs
            for blo, bhi in parts[1:]:
                for i in range(len(self.shapes)):
                    read.prefetch(i, *self.region(i, blo, bhi))
        for blo, bhi in parts:
            part = target if len(parts) == 1 else target[tuple(
                slice(b - o, e - o) for b, e, o in zip(blo, bhi, lo))]
            self.leaves_into(self.leaves(read, blo, bhi, xp), xp, part)

    def boxes(self, lo, hi, edges) -> list[tuple[list, list]]:
        """Output elements ``[lo, hi)`` cut where a leaf's region crosses a block edge of
        its input (``edges(i, a)``: input i's block starts along axis a), so that every
        leaf reads each part within one chunk: ``x[1:-1] + x[:-2] + x[2:]`` reads views
        of the chunk for the chunk's inner rows, and pieces of its neighbours only for the
        rows at its ends. Largest part first: its leaves are this chunk's own, queued on
        the device while the neighbours are asked for theirs (which they send once their
        own queued work is done). ``[lo, hi)`` whole where more than ``MAX_BOXES`` parts."""
        ndim = len(lo)
        cuts: list[set] = [set() for _ in range(ndim)]
        for i, shape in enumerate(self.shapes):
            d = ndim - len(shape)
            view = self.views[i] if self.views else None
            for j, n in enumerate(shape):
                if n == 1:
                    continue  # broadcast: one element along this axis
                if view is None:
                    a, s, t = j, 0, 1
                else:
                    a = view.axes[j]
                    if a is None:
                        continue
                    s, t = view.start[a], view.step[a]
                k = j + d
                # Output coordinate c reads input s + t*c: the block starts inside the
                # inputs [lo, hi) reads (bisected: most chunks have none), and the first c
                # past each.
                first, last = s + t * lo[k], s + t * (hi[k] - 1)
                e = edges(i, a)
                for edge in e[bisect.bisect_right(e, min(first, last)):bisect.bisect_right(e, max(first, last))]:
                    c = -((s - edge) // t) if t > 0 else (s - edge) // -t + 1
                    if lo[k] < c < hi[k]:
                        cuts[k].add(c)
        if all(not c for c in cuts) or math.prod(len(c) + 1 for c in cuts) > MAX_BOXES:
            return [(list(lo), list(hi))]
        points = [[lo[k], *sorted(cuts[k]), hi[k]] for k in range(ndim)]
        parts = [([p[b] for p, b in zip(points, at)], [p[b + 1] for p, b in zip(points, at)])
                 for at in itertools.product(*(range(len(p) - 1) for p in points))]
        return sorted(parts, key=lambda p: -math.prod(e - b for b, e in zip(*p)))

    def writes_into(self, target) -> bool:
        """Whether ``leaves_into`` can write this tree into ``target``."""
        kind, *rest = self.expr
        return kind == "in" or (kind == "call" and np.dtype(rest[2]) == target.dtype)

    def leaves_into(self, leaves, xp, target) -> None:
        """The tree's value over ``leaves`` written into ``target``: the whole tree in one
        pass (``fused``), else its last operation as a ufunc with ``out=``."""
        kind, *rest = self.expr
        if kind == "in":  # a leaf alone (``x.T`` computed): one copy into the chunk
            target[...] = leaves[rest[0]]
            return
        if fused.run_into(self.expr, leaves, xp, target, self.stripped):
            return
        # Evaluated node by node, each node's value a temporary: in slices of the chunk
        # whose temporaries fit the working-memory budget (one slice where the chunk does).
        per_element = (_calls(self.expr) + 1) * TEMPORARY_ITEMSIZE
        if target.ndim == 0:
            return self._evaluate_into(leaves, xp, target)
        for lo, hi in working_memory.slices(target.shape, per_element):
            if lo == (0,) * target.ndim and tuple(hi) == target.shape:
                return self._evaluate_into(leaves, xp, target)
            part = [_part(a, target.ndim, lo, hi) for a in leaves]
            self._evaluate_into(part, xp, target[tuple(slice(l, h) for l, h in zip(lo, hi))])

    def _evaluate_into(self, leaves, xp, target) -> None:
        """The tree over ``leaves`` into ``target``: its last operation as a ufunc with
        ``out=`` where it is one, else its value copied in."""
        kind, *rest = self.expr
        ufunc = getattr(xp, CLASSIC.get(rest[0], rest[0]), None)
        special = (rest[0] in NOT_UFUNCS or rest[0].startswith("logical_")
                   or special_values.applies(rest[0], rest[2]))
        if special or ufunc is None or not hasattr(ufunc, "nin"):
            target[...] = self.value(leaves, xp)
            return
        with np.errstate(all="ignore"):
            args = [evaluate(a, leaves, xp) for a in rest[1]]
            ufunc(*args, out=target)

    def value(self, leaves, xp):
        """The tree's value over ``leaves`` (a new array, or a leaf itself)."""
        with np.errstate(all="ignore"):
            return evaluate(self.expr, leaves, xp)


def _calls(expr) -> int:
    """How many operations the tree ``expr`` has (each may leave a temporary)."""
    return (1 + sum(_calls(a) for a in expr[2])) if expr[0] == "call" else 0


def _part(leaf, ndim: int, lo, hi):
    """The part of ``leaf`` (broadcast against a block of ``ndim`` axes) that broadcasts
    onto the block's elements ``[lo, hi)``: sliced along the axes it spans, whole along
    those it broadcasts (length 1 or missing)."""
    if getattr(leaf, "ndim", 0) == 0:
        return leaf
    skip = ndim - leaf.ndim
    return leaf[tuple(slice(None) if leaf.shape[a] == 1 else slice(lo[skip + a], hi[skip + a])
                      for a in range(leaf.ndim))]


def lead_input(x, d):
    """An input of the deferred ``x`` (tree ``d``) read as it is (no axis order) with
    ``x``'s shape and chunks: chunk k of ``x`` then reads chunk k of it."""
    return next((a for a, v in zip(d.inputs, d.views)
                 if v is None and a.shape == x.shape and a.chunks == x.chunks), None)


def result_placement(x, d):
    """Where the deferred ``x`` (tree ``d``) goes: with its lead input's chunks; else,
    for an input read through a view of its grid (``x.T``, ``x[::2]``), chunk k goes
    where the input chunk holding its first element lives."""
    lead = lead_input(x, d)
    if lead is not None:
        return lead
    for a, v in zip(d.inputs, d.views):
        if v is not None and v.shape == x.shape and v.chunks == x.chunks:
            return (a, picks_near(a, x.chunks, v.first_element))
    return None
