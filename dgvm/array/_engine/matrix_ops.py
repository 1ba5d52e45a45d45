"""Blockwise ops over matrices: the blocked product, and diagonals.

The matrix product is blocked by output chunk: the worker that holds output block
(i, j) multiplies the blocks of row panel i of ``x1`` by those of column panel j of
``x2``, reading them through the migration layer (replicas of the blocks it lacks, kept
for the next product), with CuPy's cuBLAS on GPUs and NumPy's BLAS on ``cpu``; a matrix
times a vector is blocked by the matrix's row chunks alone. A diagonal's chunks are cut
where it crosses a chunk edge, so each reads one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from dgvm.array._engine.axes import broadcast_region


@dataclass
class MatMul:
    """``x1 @ x2`` of stacks of matrices (..., M, K) and (..., K, N), or of a stack of
    matrices and a vector (K,) (``b_shape`` of one axis): the output then has no N axis,
    the vector is read where it lives, not viewed as a column and stored, and the result
    is not squeezed through a view."""

    a_shape: tuple
    b_shape: tuple
    k_edges: tuple  # K cut where either operand's chunks are cut: every read is one chunk
    dtype: object

    def block(self, read, lo, hi, xp):
        vector = len(self.b_shape) == 1
        nb = len(lo) - (1 if vector else 2)
        alo, ahi = broadcast_region(self.a_shape[:-2], lo[:nb], hi[:nb])
        if not vector:
            blo, bhi = broadcast_region(self.b_shape[:-2], lo[:nb], hi[:nb])
        ks = list(zip(self.k_edges[:-1], self.k_edges[1:]))
        for k0, k1 in ks:  # other workers' blocks asked for together (``Reads.prefetch``)
            read.prefetch(0, alo + [lo[nb], k0], ahi + [hi[nb], k1])
            read.prefetch(1, *(([k0], [k1]) if vector else (blo + [k0, lo[-1]], bhi + [k1, hi[-1]])))
        acc = None
        for k0, k1 in ks:
            a = read(0, alo + [lo[nb], k0], ahi + [hi[nb], k1]).astype(self.dtype, copy=False)
            b = (read(1, [k0], [k1]) if vector else
                 read(1, blo + [k0, lo[-1]], bhi + [k1, hi[-1]])).astype(self.dtype, copy=False)
            p = xp.matmul(a, b)
            if acc is None:
                acc = p
            else:
                acc += p
        return acc


def input_coords(rest, axes, row, col) -> list:
    """x's coordinates from the other axes' ``rest`` and a (row, col) in ``axes``."""
    out = list(rest)
    for a, v in sorted(zip(axes, (row, col))):
        out.insert(a, v)
    return out


@dataclass
class Diagonal:
    """Diagonal ``offset`` of the matrices in ``axes`` of the input, as the last axis."""

    offset: int
    axes: tuple  # the two axes of x the matrices are in

    def block(self, read, lo, hi, xp):
        r0, c0 = max(0, -self.offset), max(0, self.offset)
        # The output chunks are cut where the diagonal crosses a chunk edge of x: the
        # square read is one chunk's view (or one replica), never a gather.
        square_lo = input_coords(lo[:-1], self.axes, r0 + lo[-1], c0 + lo[-1])
        square_hi = input_coords(hi[:-1], self.axes, r0 + hi[-1], c0 + hi[-1])
        return xp.diagonal(read(0, square_lo, square_hi), axis1=self.axes[0], axis2=self.axes[1])


@dataclass
class Diag:
    """A square matrix with the 1-d input on diagonal ``k``."""

    k: int
    dtype: object

    def block(self, read, lo, hi, xp):
        out = xp.zeros(tuple(h - l for l, h in zip(lo, hi)), dtype=self.dtype)
        self.block_into(read, lo, hi, xp, out)
        return out

    def block_into(self, read, lo, hi, xp, target) -> bool:
        """Only the diagonal's elements: the rest of a new result is zero already (most
        blocks of the matrix hold none of them)."""
        r0, c0 = max(0, -self.k), max(0, self.k)
        # Element t of v sits at (r0 + t, c0 + t): the t whose place is in this block.
        t0 = max(lo[0] - r0, lo[1] - c0)
        t1 = min(hi[0] - r0, hi[1] - c0)
        if t0 < t1:
            t = xp.arange(t0, t1)
            target[t + r0 - lo[0], t + c0 - lo[1]] = read(0, [t0], [t1])
        return True
