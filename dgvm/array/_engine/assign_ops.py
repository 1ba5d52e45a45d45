"""The ops of assignments (``x[key] = value``), run on the chunks of ``x`` in place.

``Assign`` writes the positions a key selects from a scalar or an array broadcast over
the selection; ``IndexAssign`` the same where one axis is indexed by a DArray of
integers, which each chunk reads where it lives; ``MaskAssign`` writes a scalar where a
mask is true, ``MaskWrite`` the values of a 1-d array, in C order of the true positions.
``setitem``, ``index_assign``, ``mask_assign`` and ``view_writes`` make them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from dgvm.array._engine.index_ops import runs_of, within
from dgvm.array._engine.mask_ops import exclusive
from dgvm.array._engine.placement import range_within


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


@dataclass
class Assign:
    """For a chunk of ``x``: the positions the key selects in it, set from the value (a
    scalar, or input 1 broadcast over the selection's shape)."""

    maps: tuple  # per axis of x: the selection's coordinates, a range or an array (None: whole axis)
    sel_shape: tuple  # shape of the selection (ints dropped), the value broadcasts to it
    keep: tuple  # axes of x that are axes of the selection
    value: object
    value_shape: tuple | None

    def block_into(self, read, lo, hi, xp, target) -> bool:
        self._assign(read, lo, hi, xp, target)  # only the selected positions are written
        return True

    def block(self, read, lo, hi, xp):  # the chunk's home moved: assign into a copy
        out = read(0, lo, hi).copy()
        self._assign(read, lo, hi, xp, out)
        return out

    def coords(self, read, lo, hi):
        """Per axis of x: the selected positions in the chunk and their places in the
        selection, in the same order: ranges for a slice or the whole axis (found by
        arithmetic: a slice of a long axis has millions of coordinates, and a stencil step
        writes one), host arrays for an index array; None if the chunk has none."""
        local, sel = [], []
        for a, m in enumerate(self.maps):
            if m is None:
                local.append(range(hi[a] - lo[a]))
                sel.append(range(lo[a], hi[a]))
                continue
            if isinstance(m, range):
                i, k = range_within(m, lo[a], hi[a])
                if i == k:
                    return None  # the key selects nothing in this chunk
                local.append(_shifted(m[i:k], -lo[a]))
                sel.append(range(i, k))
                continue
            m = np.asarray(m)
            j = np.flatnonzero((m >= lo[a]) & (m < hi[a]))
            if not len(j):
                return None  # the key selects nothing in this chunk
            local.append(m[j] - lo[a])
            sel.append(j)
        return local, sel

    def _assign(self, read, lo, hi, xp, dst) -> None:
        found = self.coords(read, lo, hi)
        if found is None:
            return
        local, sel = found
        if self._assign_direct(read, local, sel, xp, dst):
            return
        if self.value_shape is None:
            value = self.value
        else:
            vsh = self.value_shape
            d = len(self.sel_shape) - len(vsh)
            coords = [sel[self.keep[i + d]] for i in range(len(vsh))]
            bounds = [(0, 1) if n == 1 else _bounds(c) for n, c in zip(vsh, coords)]
            vlo, vhi = [b[0] for b in bounds], [b[1] for b in bounds]
            region = self.value_region(read, vlo, vhi, xp)
            picks = [range(1) if n == 1 else _shifted(c, -l) for n, c, l in zip(vsh, coords, vlo)]
            value = region[_index(picks, xp)] if picks else region
            value = xp.broadcast_to(value, [len(sel[a]) for a in self.keep])
            value = value.reshape([len(v) for v in local])
        dst[_index(local, xp)] = value

    def value_region(self, read, vlo, vhi, xp):
        """Elements ``[vlo, vhi)`` of the value (input 1)."""
        return read(1, vlo, vhi)

    def _assign_direct(self, read, local, sel, xp, dst) -> bool:
        """Write the value straight into the selected positions of ``dst`` when that is
        possible without a temporary (``AssignTree``); whether it did."""
        return False


@dataclass
class AssignTree(Assign):
    """``Assign`` of a deferred elementwise value, computed where each chunk is written
    from the tree's inputs (inputs 1, 2, ...), never stored: ``x[1:-1] = 0.5 * (y[:-2] +
    y[2:])`` is one operation. The value is cast to its own dtype first, as a stored one
    would be. (Not for a tree that reads ``x``: NumPy's value is computed before the write.)"""

    tree: object = None  # tree_op.Elementwise
    dtype: str = ""

    def value_region(self, read, vlo, vhi, xp):
        # In one fused pass where the tree allows, else node by node in slices that fit
        # the working-memory budget (``Elementwise.leaves_into``), as a stored value is.
        out = xp.empty(tuple(h - lo for lo, h in zip(vlo, vhi)), dtype=self.dtype)
        if self.tree.writes_into(out):
            self.tree.into(self._tree_reads(read), vlo, vhi, xp, out)
        else:
            out[...] = self.tree.value(self.tree.leaves(self._tree_reads(read), vlo, vhi, xp), xp)
        return out

    @staticmethod
    def _tree_reads(read):
        """The tree's inputs (a ``tree_op.Reads``), which follow x (input 0)."""
        return read.after(1)

    def _assign_direct(self, read, local, sel, xp, dst) -> bool:
        """The tree computed straight into ``dst``'s selected positions (no value
        buffer, no copy) when they are one box of it (runs of step 1 per axis, in order),
        the value is not broadcast onto them and has ``dst``'s dtype. (The tree does not
        read x, so ``dst`` is none of its leaves.)"""
        if (tuple(self.value_shape) != tuple(self.sel_shape) or list(self.keep) != sorted(self.keep)
                or np.dtype(self.dtype) != dst.dtype or not self.tree.writes_into(dst)):
            return False
        if not all(_run(c) for c in (*local, *sel)):
            return False
        keep = set(self.keep)
        # (Ellipsis: a view also where every axis is an integer, not NumPy's scalar)
        part = dst[tuple(slice(int(c[0]), int(c[-1]) + 1) if a in keep else int(c[0])
                         for a, c in enumerate(local)) + (Ellipsis,)]
        vlo = [int(sel[a][0]) for a in self.keep]
        vhi = [int(sel[a][-1]) + 1 for a in self.keep]
        self.tree.into(self._tree_reads(read), vlo, vhi, xp, part)
        return True


def _bounds(c) -> tuple[int, int]:
    """The least position of ``c`` (a non-empty range or host array) and one past its largest."""
    if isinstance(c, range):
        return min(c[0], c[-1]), max(c[0], c[-1]) + 1
    return int(c.min()), int(c.max()) + 1


def _shifted(c, by: int):
    """Positions ``c`` (a range or a host array) moved by ``by``."""
    return range(c.start + by, c.stop + by, c.step) if isinstance(c, range) else c + by


def _array(c):
    """Positions ``c`` (a range or a host array) as a host array."""
    return np.arange(c.start, c.stop, c.step) if isinstance(c, range) else c


def _run(c) -> bool:
    """Whether positions ``c`` (a range or a host array) are a run of step 1."""
    if isinstance(c, range):
        return len(c) > 0 and (c.step == 1 or len(c) == 1)
    return len(c) > 0 and int(c[-1]) - int(c[0]) == len(c) - 1 and (len(c) < 3 or bool((np.diff(c) == 1).all()))


def _index(coords, xp):
    """An index of the positions ``coords`` (a range or a host array per axis): slices
    where they are ranges or runs of step 1 (a strided copy, not a gather), else ``ix_``."""
    if all(isinstance(c, range) or _run(c) for c in coords):
        return tuple(_slice(c) for c in coords)
    return xp.ix_(*(xp.asarray(_array(c)) for c in coords))


def _slice(c) -> slice:
    """The slice of positions ``c``: a non-empty range, or a run of step 1."""
    if not isinstance(c, range):
        return slice(int(c[0]), int(c[-1]) + 1)
    return slice(c.start, None if c.stop < 0 else c.stop, c.step)  # (stop -1: through 0)


@dataclass
class IndexAssign(Assign):
    """``Assign`` where axis ``axis`` is indexed by the 1-d DArray of integers read as
    input ``index_input``, cut into runs (``index_ops.runs_of`` of at most ``cut`` per
    chunk of it): a chunk reads the runs that have indices in its block along the axis
    (``hits``: per run and block, packed bits), and of indices repeated the last one
    wins, as in NumPy. The indices were checked in bounds before
    (``index_gather.counted``)."""

    axis: int = 0
    n: int = 0  # x's length along the axis
    edges: np.ndarray = None  # x's block starts along the axis
    index_chunks: tuple = ()
    cut: int = 1
    hits: np.ndarray = None
    index_input: int = 1

    @functools.cached_property
    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(the runs' starts and end, per run and block whether an index falls there)."""
        lengths = [r for c in self.index_chunks for r in runs_of(c, self.cut)]
        rows = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        nb = len(self.edges) - 1
        return rows, np.unpackbits(self.hits, count=len(lengths) * nb).reshape(len(lengths), nb).astype(bool)

    def __getstate__(self):  # the runs are derived where they are used
        return {k: v for k, v in self.__dict__.items() if k != "runs"}

    def coords(self, read, lo, hi):
        found = super().coords(read, lo, hi)  # the axis's map is None: all of it, replaced here
        if found is None:
            return None
        local, sel = found
        a = self.axis
        rows, hits = self.runs
        b = int(np.searchsorted(self.edges, lo[a], side="right")) - 1
        places, positions = [], []
        for r in np.flatnonzero(hits[:, b]):
            s, e = int(rows[r]), int(rows[r + 1])
            v = within(_host(read(self.index_input, [s], [e])), self.n, np)
            inside = np.flatnonzero((v >= lo[a]) & (v < hi[a]))
            positions.append(v[inside] - lo[a])
            places.append(inside + s)
        if not positions:
            return None
        at, j = np.concatenate(positions), np.concatenate(places)
        if not len(at):
            return None
        # The last of repeated indices wins (NumPy's result in practice; on a GPU a
        # scatter's order is not defined): keep only it.
        _, last = np.unique(at[::-1], return_index=True)
        keep = np.sort(len(at) - 1 - last)
        local[a], sel[a] = at[keep], j[keep]
        return local, sel


@dataclass
class MaskAssign:
    value: object

    def block_into(self, read, lo, hi, xp, target) -> bool:
        target[read(1, lo, hi)] = self.value
        return True

    def block(self, read, lo, hi, xp):  # the chunk's home moved: a new array
        return xp.where(read(1, lo, hi), self.value, read(0, lo, hi))


@dataclass
class MaskWrite:
    """For a chunk of ``x`` (input 0; 1: a mask of x's shape; 2: the values, 1-d, one
    per true element of the mask in C order; 3: the mask's per-line counts, where x's
    chunks cut its rows): the chunk's true positions set from its values. The values of
    row block r (the blocks along axis 0) start at ``row_starts[r]``; where x's chunks
    hold whole rows, a chunk's are one run there, else one per line of the chunk
    (``mask_ops.Interleave``'s segments, found the same way)."""

    row_starts: np.ndarray
    edges: list  # x's block starts, per axis
    rows_whole: bool

    def block_into(self, read, lo, hi, xp, target) -> bool:
        self._write(read, lo, hi, xp, target)
        return True

    def block(self, read, lo, hi, xp):  # the chunk's home moved: write into a copy
        out = read(0, lo, hi).copy()
        self._write(read, lo, hi, xp, out)
        return out

    def _write(self, read, lo, hi, xp, dst) -> None:
        values = self._values(read, lo, hi, xp)
        if values is not None:
            dst[read(1, lo, hi)] = values

    def _values(self, read, lo, hi, xp):
        b0 = int(np.searchsorted(self.edges[0], lo[0], side="right")) - 1
        s, e = int(self.row_starts[b0]), int(self.row_starts[b0 + 1])
        if self.rows_whole:
            return read(2, [s], [e]) if e > s else None
        nd = len(self.edges)
        r0, r1 = int(self.edges[0][b0]), int(self.edges[0][b0 + 1])
        inner = [int(ed[-1]) for ed in self.edges[1:-1]]
        cnt = _host(read(3, [r0] + [0] * (nd - 2) + [0], [r1] + inner + [len(self.edges[-1]) - 1]))
        seg = exclusive(cnt) + s  # where each line's values start, lines in C order
        j = int(np.searchsorted(self.edges[-1], lo[-1], side="right")) - 1
        at = (slice(lo[0] - r0, hi[0] - r0),) + tuple(slice(lo[a], hi[a]) for a in range(1, nd - 1)) + (j,)
        so, sn = seg[at].reshape(-1), cnt[at].reshape(-1)
        n = int(sn.sum())
        if not n:
            return None
        pos = np.repeat(so - exclusive(sn), sn) + np.arange(n)
        region = read(2, [int(pos[0])], [int(pos[-1]) + 1])
        return region[xp.asarray(pos - pos[0])]
