"""``View``: how a leaf of a deferred tree reads its input array in another shape.

Basic indexing (``x[1:-1, ::2]``, ``x[3]``, ``x[None]``) and axis permutations (``x.T``)
make a view of their input's memory (``aliases``): to the engine, a one-leaf deferred
tree reading the input through a ``View``, which elementwise operations and reductions
read in place (``x[1:] - x[:-1]`` is one pass over x's chunks; ``x[::3].sum()`` stores
nothing). A view of a view is one view of the first array.

View axis ``k`` walks input axis ``axes[k]`` (None: a new axis of length 1) from
``start[a]`` by ``step[a]`` (non-zero, may be negative); an input axis no view axis walks
is fixed at ``start[a]`` (an integer index).
"""

from __future__ import annotations

from dataclasses import dataclass

from dgvm.array._engine.placement import gathered_chunks


def walk(start: int, step: int, n: int) -> range:
    """The input coordinates of a view axis of length ``n`` (kept a range: a view of a
    long axis is millions of them)."""
    return range(start, start + step * n, step)


@dataclass(frozen=True)
class View:
    axes: tuple
    start: tuple
    step: tuple
    shape: tuple
    chunks: tuple

    # -- making views ----------------------------------------------------------------------
    @classmethod
    def of_axes(cls, x, axes) -> "View":
        """View axis k is input axis ``axes[k]`` (None: a new axis of length 1); input
        axes not named have length 1 and drop: permutations, ``expand_dims``, ``squeeze``."""
        return cls._make(x, tuple(axes), (0,) * x.ndim, (1,) * x.ndim)

    @classmethod
    def of_key(cls, x, items: list, new_axes: list) -> "View":
        """From a basic index expanded to one entry per input axis (slices and ints) and
        the result positions where ``None`` adds an axis (``keys.plan``'s)."""
        axes, start, step = [], [], []
        for a, k in enumerate(items):
            if isinstance(k, slice):
                s, _, t = k.indices(x.shape[a])
                start.append(s)
                step.append(t)
                axes.append(a)
            else:  # an integer, checked and made non-negative by the caller
                start.append(int(k))
                step.append(0)
        for pos in new_axes:
            axes.insert(pos, None)
        lengths = {a: len(range(x.shape[a])[k]) for a, k in enumerate(items) if isinstance(k, slice)}
        return cls._make(x, tuple(axes), tuple(start), tuple(step), lengths)

    @classmethod
    def _make(cls, x, axes, start, step, lengths=None) -> "View":
        shape, chunks = [], []
        for a in axes:
            if a is None:
                shape.append(1)
                chunks.append((1,))
                continue
            n = x.shape[a] if lengths is None else lengths[a]
            shape.append(n)
            if step[a] == 1 and start[a] == 0 and n == x.shape[a]:
                chunks.append(x.chunks[a])  # the axis whole: its chunks as they are
            else:
                chunks.append(gathered_chunks(x, a, walk(start[a], step[a], n)))
        return cls(tuple(axes), tuple(start), tuple(step), tuple(shape), tuple(chunks))

    def then(self, outer: "View") -> "View":
        """``outer`` (a view of this view's result) as one view of this view's input."""
        axes, start, step = [], list(self.start), list(self.step)
        for j, v in enumerate(self.axes):  # this view's axis j, as outer indexes it
            if v is None:
                continue
            start[v] = self.start[v] + self.step[v] * outer.start[j]
            step[v] = self.step[v] * outer.step[j]
        for k in outer.axes:
            axes.append(None if k is None or self.axes[k] is None else self.axes[k])
        return View(tuple(axes), tuple(start), tuple(step), outer.shape, outer.chunks)

    # -- reading ---------------------------------------------------------------------------
    def region(self, lo, hi):
        """The input's bounding box ``[slo, shi)`` of view elements ``[lo, hi)``."""
        slo = [s for s in self.start]
        shi = [s + 1 for s in self.start]
        for k, a in enumerate(self.axes):
            if a is None:
                continue
            s, t = self.start[a], self.step[a]
            first, last = s + t * lo[k], s + t * (hi[k] - 1)
            slo[a], shi[a] = min(first, last), max(first, last) + 1
        return slo, shi

    def apply(self, block):
        """View elements from the input's bounding box ``block`` (as ``region`` gave)."""
        index = tuple(
            slice(None, None, self.step[a]) if a in self.axes else 0
            for a in range(len(self.start))
        )
        value = block[index]
        kept = [a for a in range(len(self.start)) if a in self.axes]
        order = [kept.index(a) for a in self.axes if a is not None]
        if order != sorted(order):
            value = value.transpose(order)
        if None in self.axes:  # new axes of length 1, still a view
            value = value[tuple(None if a is None else slice(None) for a in self.axes)]
        return value

    def first_element(self, lo) -> list:
        """Input coordinates of view element ``lo`` (for placing a computed view)."""
        return self.region(lo, [v + 1 for v in lo])[0]
