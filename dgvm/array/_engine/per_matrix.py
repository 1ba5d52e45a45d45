"""Matrix functions run where a whole matrix is read: factorizations, inverses, solves.

``linalg.cholesky``, ``inv``, ``eigh``, ``svd``, ``qr``, ``solve``, ``det`` and the rest
have no owner-computes form over blocks of one matrix that beats running them on one
device, so each runs once per matrix, with NumPy's LAPACK on ``cpu`` and CuPy's
cuSOLVER on GPUs. A stack of matrices is spread by its batch axes: the result keeps the
input's batch chunks, each result chunk is made on the worker that holds the input's
first matrix of that chunk, and that worker reads the whole matrices of its chunk
through the migration layer (views of local chunks, replicas of the rest). One matrix
cut into many chunks is thus gathered to one worker: it has to fit there
(``OutOfMemory`` names the worker and its free memory otherwise).

A function with several results (``eigh``, ``svd``, ``qr``, ``slogdet``) runs once: its
results are packed side by side along one last axis of a single result array, and split
back into views of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from dgvm.array._engine import blockwise
from dgvm.array._engine.axes import broadcast_chunks, broadcast_region
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.dtypes import result_type
from dgvm.array._engine.placement import result_like


@dataclass(frozen=True)
class Operand:
    """An input of a matrix function: its shape and how many trailing axes make one of
    its items (2: a matrix, 1: a vector, 0: a number per matrix); the rest are batch axes,
    broadcast against the other operands'."""

    shape: tuple
    core: int

    @property
    def batch(self) -> tuple:
        return self.shape[: len(self.shape) - self.core]


def stack_chunks(arrays, cores, batch: tuple) -> tuple:
    """Chunks of the broadcast batch axes ``batch`` of ``arrays`` (each with ``cores``
    trailing item axes), as an elementwise result over their stacks has them."""
    stacks = [SimpleNamespace(shape=a.shape[:a.ndim - c], chunks=a.chunks[:a.ndim - c], ndim=a.ndim - c)
              for a, c in zip(arrays, cores)]
    return broadcast_chunks(stacks, batch) if batch else ()


@dataclass
class _PerMatrix:
    fn: object  # fn(xp, *items) -> tuple of results, each batch + its tail
    operands: tuple  # Operand per input
    tails: tuple  # per result: its shape after the batch axes
    dtypes: tuple  # per result
    packed: object  # dtype of the one result array when there are several, else None
    compute: object  # dtype the matrices and vectors are cast to before fn

    def block(self, read, lo, hi, xp):
        nb = len(lo) - (1 if self.packed is not None else len(self.tails[0]))
        batch = tuple(h - l for l, h in zip(lo[:nb], hi[:nb]))
        items = []
        for i, op in enumerate(self.operands):
            blo, bhi = broadcast_region(op.batch, lo[:nb], hi[:nb])
            core = op.shape[len(op.batch):]
            a = read(i, blo + [0] * op.core, bhi + list(core))
            if op.core:
                a = a.astype(self.compute, copy=False)
            items.append(xp.broadcast_to(a, batch + tuple(core)))
        results = [xp.asarray(r) for r in self.fn(xp, *items)]
        if self.packed is None:
            return results[0].astype(self.dtypes[0], copy=False)
        # Each result to the packed type in one cast (a real result's values fit it).
        return xp.concatenate([r.reshape(batch + (-1,)).astype(self.packed, copy=False) for r in results],
                              axis=-1)


def run(fn, inputs, tails, dtypes, compute, name: str) -> list:
    """``fn(xp, *items)`` once per stack position of the DArrays ``inputs`` (pairs of a
    DArray and its core rank, the first one a matrix), its matrices and vectors cast to
    ``compute``; ``tails``/``dtypes``: the shape
    after the batch axes and the dtype of each result. Results: new DArrays with the
    broadcast batch axes of the inputs, chunked as the broadcast stacks are (several
    results: computed into one packed array, then each taken out in one local pass).
    The body ``fn`` is one of ``matrix_bodies``'."""
    arrays = [a for a, _ in inputs]
    operands = tuple(Operand(tuple(a.shape), core) for a, core in inputs)
    try:
        batch = tuple(np.broadcast_shapes(*(o.batch for o in operands)))
    except ValueError:
        raise ValueError(f"linalg.{name}: the stacks of shapes {[a.shape for a in arrays]} do not broadcast") from None
    batch_chunks = stack_chunks(arrays, [o.core for o in operands], batch)
    dtypes = tuple(np.dtype(t) for t in dtypes)
    packed = None
    if len(tails) == 1:
        shape, tail_chunks = batch + tuple(tails[0]), tuple((n,) for n in tails[0])
        dtype = dtypes[0]
    else:
        sizes = [math.prod(t) for t in tails]
        packed = result_type(*dtypes)
        shape, tail_chunks, dtype = batch + (sum(sizes),), ((sum(sizes),),), packed
    first = operands[0]
    out = result_like(arrays[0], shape, dtype, tuple(batch_chunks) + tail_chunks,
                      lambda lo: broadcast_region(first.batch, lo[:len(batch)], lo[:len(batch)])[0] + [0] * first.core)
    op = _PerMatrix(fn, operands, tuple(tuple(t) for t in tails), dtypes, packed, np.dtype(compute))
    blockwise.run(op, out, arrays, f"linalg-{name}")
    if packed is None:
        return [out]
    results, at = [], 0
    for tail, size, t in zip(tails, sizes, dtypes):
        shape = batch + tuple(tail)
        if math.prod(shape):  # one local pass per result, chunked as the stacks are
            part = result_like(out, shape, t, tuple(batch_chunks) + tuple((n,) for n in tail),
                               lambda lo, at=at: lo[:len(batch)] + [at])
            blockwise.run(_Unpack(len(batch), at, size, tuple(tail), t), part, [out], f"linalg-{name}-unpack")
        else:  # no elements: held on the caller (zero_size)
            part = type(out).empty_on_caller(shape, t, out.client)
        results.append(part)
        at += size
    return results


@dataclass
class _Unpack:
    """One result of a function with several, out of the packed array ``run`` made: its
    elements ``[at, at + size)`` along the last axis, reshaped to ``tail``, as ``dtype``
    (the real part where the packed type is complex and the result is not)."""

    nb: int  # batch axes
    at: int
    size: int
    tail: tuple
    dtype: object

    def block(self, read, lo, hi, xp):
        nb = self.nb
        v = read(0, lo[:nb] + [self.at], hi[:nb] + [self.at + self.size])
        v = v.reshape(v.shape[:nb] + self.tail)
        if v.dtype.kind == "c" and np.dtype(self.dtype).kind != "c":
            v = xp.real(v)
        return v.astype(self.dtype, copy=False)


def float_dtype(*arrays) -> np.dtype:
    """The dtype a factorization computes in: the inputs' promoted floating type (bool and
    integers become float64, as in NumPy)."""
    t = result_type(*arrays)
    return t if t.kind in "fc" else np.dtype(np.float64)


def real_dtype(t) -> np.dtype:
    """The real type of the same precision (float32 for complex64)."""
    return np.finfo(t).dtype


def check_matrices(name: str, x, square: bool = False) -> None:
    """The checks every matrix function starts with: a DArray of at least 2 dimensions,
    square ones where asked."""
    if not isinstance(x, ArrayCore):
        raise TypeError(f"linalg.{name} needs a DArray, not {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"linalg.{name} needs an array of at least 2 dimensions (a stack of matrices); got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.{name} needs square matrices; got shape {x.shape}")
