"""Linear algebra functions of the main namespace: ``matmul``/``@``, ``matrix_transpose``,
``tensordot``, ``vecdot``, and NumPy's ``dot``, ``inner``, ``vdot``, ``outer``, ``einsum``,
``diag``, ``diagonal``, ``trace``.

The matrix product is blocked by output chunk (``_engine.matrix_ops.MatMul``): the worker
that holds output block (i, j) multiplies row panel i of ``x1`` by column panel j of
``x2``, reading the blocks it lacks through the migration layer; a matrix (or a stack of
them) times a vector is blocked by the matrices' row chunks alone, the vector read where
it lives; the product of two vectors is the sum of their products, one
reduction that stores nothing. ``diagonal`` and
``trace`` read only the blocks the diagonal crosses. ``einsum`` is planned on the
caller from its subscripts (``_engine.einsum_spec``) and runs as these operations:
diagonals, sums, axis permutations, products and ``matmul``. The standard's ``linalg``
extension is ``dgvm.array.linalg``.
"""

from __future__ import annotations

import numpy as np

from dgvm.array._engine import blockwise, per_matrix
from dgvm.array._engine.aliases import derived, stand_in
from dgvm.array._engine.apply import apply
from dgvm.array._engine.axes import broadcast_region, normalize_axis
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.dtypes import check, result_type
from dgvm.array._engine.einsum_spec import from_sublists, parse
from dgvm.array._engine.matrix_ops import Diag, Diagonal, MatMul, input_coords
from dgvm.array._engine.placement import result_like
from dgvm.array._engine.zero_size import empty_aware
from dgvm.array.manipulation import broadcast_to, expand_dims, permute_dims, reshape, reshaped, squeeze
from dgvm.array.statistical import sum as total_of
from dgvm.protocol.errors import NotSupported

__all__ = [
    "diag", "diagonal", "dot", "einsum", "inner", "matmul", "matrix_transpose", "outer", "tensordot",
    "trace", "vdot", "vecdot",
]

_SCALARS = (bool, int, float, complex, np.generic)


def _operand(v, name: str, arg: str):
    """A DArray, or a scalar (a product with it is elementwise). A Python scalar counts
    as a NumPy one of its default dtype, as NumPy's ``dot`` and ``inner`` take it (not as
    the weak scalar of an elementwise function)."""
    if not isinstance(v, (ArrayCore,) + _SCALARS):
        raise TypeError(f"dgvm.array.{name}: {arg} must be a DArray or a scalar, not {type(v).__name__}")
    return v if isinstance(v, (ArrayCore, np.generic)) else np.asarray(v)[()]


def _scalar_product(a, b, name: str):
    """The product of ``a`` and ``b`` when one is a scalar or 0-d (elementwise), else None."""
    if not isinstance(a, ArrayCore) and not isinstance(b, ArrayCore):
        return getattr(np, name)(a, b)  # two scalars: NumPy's scalar
    if _is_scalar(a) or _is_scalar(b):
        return apply("multiply", a, b)
    return None


def _is_scalar(v) -> bool:
    return not isinstance(v, ArrayCore) or v.ndim == 0


@empty_aware
def matmul(x1, x2, /):
    """Matrix product with NumPy's rules for 1-d operands and broadcast batch axes."""
    if not isinstance(x1, ArrayCore) or not isinstance(x2, ArrayCore):
        raise TypeError("matmul needs two DArrays")
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul does not take 0-d arrays; use multiply")
    if x2.ndim == 1:
        _aligned(x1, x2, x1.shape[-1], x2.shape[0])
        dtype = result_type(x1, x2)
        if x1.ndim == 1 and dtype.kind in "iufc":  # the sum of the products: one reduction, nothing stored
            return total_of(apply("multiply", x1, x2), dtype=dtype)
        if x1.ndim >= 2:  # blocked by x1's row chunks, x2 read as it is
            out = result_like(x1, x1.shape[:-1], dtype, x1.chunks[:-1], lambda lo: list(lo) + [0])
            blockwise.run(MatMul(x1.shape, x2.shape, _k_edges(x1.chunks[-1], x2.chunks[0]), dtype),
                          out, [x1, x2], "matmul")
            return out
    drop = []
    if x1.ndim == 1:
        x1 = expand_dims(x1, axis=0)
        drop.append(-2)
    if x2.ndim == 1:
        x2 = expand_dims(x2, axis=1)
        drop.append(-1)
    _aligned(x1, x2, x1.shape[-1], x2.shape[-2])
    try:
        batch = tuple(np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except ValueError:
        raise ValueError(f"matmul: batch shapes of {x1.shape} and {x2.shape} do not broadcast") from None
    dtype = result_type(x1, x2)
    shape = batch + (x1.shape[-2], x2.shape[-1])
    chunks = per_matrix.stack_chunks([x1, x2], [2, 2], batch) + (x1.chunks[-2], x2.chunks[-1])
    out = result_like(x1, shape, dtype, chunks,
                      lambda lo: broadcast_region(x1.shape[:-2], lo[:len(batch)], lo[:len(batch)])[0] + [lo[-2], 0])
    blockwise.run(MatMul(x1.shape, x2.shape, _k_edges(x1.chunks[-1], x2.chunks[-2]), dtype), out, [x1, x2], "matmul")
    return squeeze(out, axis=tuple(drop)) if drop else out


def _aligned(x1, x2, k1: int, k2: int) -> None:
    if k1 != k2:
        raise ValueError(f"matmul: shapes {x1.shape} and {x2.shape} do not align ({k1} != {k2})")


def _k_edges(k1_chunks, k2_chunks) -> tuple:
    """Where either operand's chunks cut the shared axis: every read of a product is one chunk."""
    return tuple(int(e) for e in sorted(set(np.cumsum((0,) + tuple(k1_chunks)).tolist())
                                        | set(np.cumsum((0,) + tuple(k2_chunks)).tolist())))


@empty_aware
def matrix_transpose(x, /):
    """Transpose of the last two axes (a view: no copy)."""
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose needs at least 2 dimensions, got {x.ndim}")
    axes = list(range(x.ndim))
    axes[-2], axes[-1] = axes[-1], axes[-2]
    return permute_dims(x, axes)


@empty_aware
def tensordot(x1, x2, /, *, axes=2):
    """Sum of products over ``axes`` (an int: the last of x1 with the first of x2)."""
    if isinstance(axes, int):
        a1 = list(range(x1.ndim - axes, x1.ndim))
        a2 = list(range(axes))
    else:
        a1, a2 = ([axes[0]] if isinstance(axes[0], int) else list(axes[0]),
                  [axes[1]] if isinstance(axes[1], int) else list(axes[1]))
    a1 = list(normalize_axis(tuple(a1), x1.ndim, sort=False))
    a2 = list(normalize_axis(tuple(a2), x2.ndim, sort=False))
    if len(a1) != len(a2):
        raise ValueError(f"tensordot: {len(a1)} axes of x1 against {len(a2)} axes of x2")
    for i, j in zip(a1, a2):
        if x1.shape[i] != x2.shape[j]:
            raise ValueError(f"tensordot: axis {i} of x1 ({x1.shape[i]}) and axis {j} of x2 ({x2.shape[j]}) differ")
    free1 = [a for a in range(x1.ndim) if a not in a1]
    free2 = [a for a in range(x2.ndim) if a not in a2]
    m = int(np.prod([x1.shape[a] for a in free1], dtype=np.int64))
    n = int(np.prod([x2.shape[a] for a in free2], dtype=np.int64))
    k = int(np.prod([x1.shape[a] for a in a1], dtype=np.int64))
    # permute_dims copies even in the identity order: skipped then
    left = reshaped(x1 if free1 + a1 == list(range(x1.ndim)) else permute_dims(x1, free1 + a1), (m, k))
    right = reshaped(x2 if a2 + free2 == list(range(x2.ndim)) else permute_dims(x2, a2 + free2), (k, n))
    out = matmul(left, right)
    return reshaped(out, tuple(x1.shape[a] for a in free1) + tuple(x2.shape[a] for a in free2))


@empty_aware
def vecdot(x1, x2, /, *, axis=-1):
    """Dot product of vectors along ``axis`` (complex: the first is conjugated)."""
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: axis {axis} has {x1.shape[axis]} and {x2.shape[axis]} elements")
    a = apply("conj", x1) if x1.dtype.kind == "c" else x1
    prod = apply("multiply", a, x2)
    return total_of(prod, axis=axis, dtype=prod.dtype)  # the inputs' promoted type, as NumPy's


@empty_aware
def dot(a, b, /):
    """NumPy's ``dot``: vectors -> inner product, matrices -> matmul, a scalar -> the
    elementwise product, else tensordot over the last axis of ``a`` and the
    second-to-last of ``b``."""
    a, b = _operand(a, "dot", "a"), _operand(b, "dot", "b")
    scaled = _scalar_product(a, b, "dot")
    if scaled is not None:
        return scaled
    if a.ndim == 1 and b.ndim == 1:
        prod = apply("multiply", a, b)
        return total_of(prod, dtype=prod.dtype)
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [max(b.ndim - 2, 0)]))


@empty_aware
def inner(a, b, /):
    """NumPy's ``inner``: sums of products over the last axes of ``a`` and ``b`` (no
    conjugation); a scalar gives the elementwise product. The result's shape is
    ``a.shape[:-1] + b.shape[:-1]``."""
    a, b = _operand(a, "inner", "a"), _operand(b, "inner", "b")
    scaled = _scalar_product(a, b, "inner")
    if scaled is not None:
        return scaled
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inner: shapes {a.shape} and {b.shape} not aligned: their last axes "
                         f"have {a.shape[-1]} and {b.shape[-1]} elements")
    if a.ndim == 1 and b.ndim == 1:
        return dot(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


@empty_aware
def vdot(a, b, /):
    """NumPy's ``vdot``: the dot product of ``a`` and ``b`` flattened, ``a`` conjugated
    when complex (a 0-d DArray)."""
    for v, arg in ((a, "a"), (b, "b")):
        if not isinstance(v, ArrayCore):
            raise TypeError(f"dgvm.array.vdot: {arg} must be a DArray, not {type(v).__name__}")
    if a.size != b.size:
        raise ValueError(f"vdot: vectors have different lengths ({a.size} and {b.size} elements)")
    a, b = reshape(a, (-1,)), reshape(b, (-1,))
    prod = apply("multiply", apply("conj", a) if a.dtype.kind == "c" else a, b)
    return total_of(prod, dtype=prod.dtype)


@empty_aware
def outer(x1, x2, /):
    """Outer product of two 1-d arrays."""
    return apply("multiply", reshape(x1, (-1, 1)), reshape(x2, (1, -1)))


# -- NumPy's diagonal functions (with axis1 and axis2) ----------------------------------------
def _axes(a, axis1, axis2, name: str) -> tuple:
    if not isinstance(a, ArrayCore):
        raise TypeError(f"{name} needs a DArray, not {type(a).__name__}")
    if a.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions; got shape {a.shape}")
    return normalize_axis((axis1, axis2), a.ndim, sort=False)  # AxisError, or repeated


def diagonal_of(x, offset: int, axes: tuple):
    """Diagonal ``offset`` of the matrices in ``axes`` (two distinct non-negative axes
    of x, rows first), as the result's last axis; NumPy's ``diagonal``. Only the blocks
    the diagonal crosses are read."""
    m, n = (x.shape[a] for a in axes)
    r0, c0 = max(0, -offset), max(0, offset)
    k = max(0, min(m - r0, n - c0))
    rows, cols = (np.cumsum((0,) + x.chunks[a]).tolist() for a in axes)
    edges = sorted({0, k} | {e - r0 for e in rows if 0 < e - r0 < k} | {e - c0 for e in cols if 0 < e - c0 < k})
    rest = [a for a in range(x.ndim) if a not in axes]
    chunks = tuple(x.chunks[a] for a in rest) + (tuple(b - a for a, b in zip(edges[:-1], edges[1:])) or (0,),)
    out = result_like(x, tuple(x.shape[a] for a in rest) + (k,), x.dtype, chunks,
                      lambda lo: input_coords(lo[:-1], axes, r0 + lo[-1], c0 + lo[-1]))
    blockwise.run(Diagonal(int(offset), tuple(axes)), out, [x], "diagonal")
    return out


@empty_aware
def diagonal(a, offset=0, axis1=0, axis2=1):
    """NumPy's ``diagonal``: diagonal ``offset`` of the matrices in axes ``axis1`` and
    ``axis2``, as the last axis of the result: a read-only view, as NumPy's."""
    axes = _axes(a, axis1, axis2, "diagonal")
    return diagonal_view(a, offset, axes)


def diagonal_view(a, offset: int, axes: tuple):
    """``diagonal_of`` as a read-only view of ``a`` (its values those of ``a`` when read)."""
    layout = np.diagonal(stand_in(a), offset, *axes)
    return derived(a, lambda s: diagonal_of(s, offset, axes), readonly=True, layout=layout)


@empty_aware
def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """NumPy's ``trace``: sums along diagonal ``offset`` of axes ``axis1`` and ``axis2``."""
    return total_of(diagonal_of(a, offset, _axes(a, axis1, axis2, "trace")), axis=-1, dtype=dtype)


@empty_aware
def diag(v, k=0):
    """NumPy's ``diag``: a 1-d ``v`` becomes a square matrix with ``v`` on diagonal
    ``k`` (its chunks follow ``v``'s along both axes); a 2-d ``v`` gives its diagonal."""
    if not isinstance(v, ArrayCore):
        raise TypeError(f"diag needs a DArray, not {type(v).__name__}")
    if v.ndim == 2:
        return diagonal(v, offset=k)
    if v.ndim != 1:
        raise ValueError(f"diag needs a 1-d or 2-d array; got shape {v.shape}")
    n = v.shape[0] + abs(k)
    side = v.chunks[0] + ((abs(k),) if k else ())
    out = type(v).allocated((n, n), v.dtype, (side, side))  # zero-filled: Diag writes the diagonal only
    blockwise.run(Diag(int(k), v.dtype), out, [v], "diag")
    return out


# -- einsum -----------------------------------------------------------------------------
_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def _take_order(x, labels: list, order: list):
    """``x`` with its axes in the order of ``order``'s labels (all of ``labels``)."""
    axes = [labels.index(lab) for lab in order]
    return x if axes == list(range(x.ndim)) else permute_dims(x, axes)


def _reduced(x, labels: list, keep: set):
    """``x`` with repeated labels taken as their diagonal, then the labels not in
    ``keep`` summed over (in x's dtype, as NumPy's einsum)."""
    labels = list(labels)
    while True:
        dup = next((lab for lab in labels if labels.count(lab) > 1), None)
        if dup is None:
            break
        p = labels.index(dup)
        q = labels.index(dup, p + 1)
        if x.shape[p] != x.shape[q]:
            raise ValueError(f"einsum: subscript {dup!r} is repeated on axes of {x.shape[p]} and "
                             f"{x.shape[q]} elements")
        x = diagonal_of(x, 0, (p, q))  # the diagonal becomes the last axis
        labels = [lab for i, lab in enumerate(labels) if i not in (p, q)] + [dup]
    gone = tuple(i for i, lab in enumerate(labels) if lab not in keep)
    if gone:
        x = total_of(x, axis=gone, dtype=x.dtype)
        labels = [lab for i, lab in enumerate(labels) if i not in gone]
    return x, labels


def _sizes(x, labels: list, group: list) -> tuple:
    return tuple(x.shape[labels.index(lab)] for lab in group)


def _contracted(a, la: list, b, lb: list, keep: set):
    """The product of ``a`` and ``b`` summed over their shared labels not in ``keep``,
    and its labels: the shared ones kept, then a's own, then b's own."""
    batch = [lab for lab in la if lab in lb and lab in keep]
    summed = [lab for lab in la if lab in lb and lab not in keep]
    own_a = [lab for lab in la if lab not in lb]
    own_b = [lab for lab in lb if lab not in la]
    out_labels = batch + own_a + own_b
    if not summed:  # an outer or elementwise product, broadcast
        a2 = _take_order(a, la, batch + own_a)
        for _ in own_b:
            a2 = expand_dims(a2, axis=a2.ndim)
        b2 = _take_order(b, lb, batch + own_b)
        for _ in own_a:
            b2 = expand_dims(b2, axis=len(batch))
        return apply("multiply", a2, b2), out_labels
    if not own_a and not own_b:  # products summed along rows: no matrices to multiply
        prod = apply("multiply", _take_order(a, la, batch + summed), _take_order(b, lb, batch + summed))
        return total_of(prod, axis=tuple(range(len(batch), prod.ndim)), dtype=prod.dtype), out_labels
    # Summed labels of one element on one side and more on the other broadcast (NumPy's rule).
    ka, kb = _sizes(a, la, summed), _sizes(b, lb, summed)
    if ka != kb:
        full = tuple(max(p, q) for p, q in zip(ka, kb))
        if ka != full:
            a = broadcast_to(a, tuple(full[summed.index(lab)] if lab in summed else n for lab, n in zip(la, a.shape)))
        else:
            b = broadcast_to(b, tuple(full[summed.index(lab)] if lab in summed else n for lab, n in zip(lb, b.shape)))
    k = int(np.prod(_sizes(a, la, summed), dtype=np.int64))
    m = int(np.prod(_sizes(a, la, own_a), dtype=np.int64))
    n = int(np.prod(_sizes(b, lb, own_b), dtype=np.int64))
    a2 = reshape(_take_order(a, la, batch + own_a + summed), _sizes(a, la, batch) + (m, k))
    b2 = reshape(_take_order(b, lb, batch + summed + own_b), _sizes(b, lb, batch) + (k, n))
    out = matmul(a2, b2)
    return reshape(out, out.shape[:len(batch)] + _sizes(a, la, own_a) + _sizes(b, lb, own_b)), out_labels


def _label_sizes(operands, inputs) -> None:
    """Each label has one size, or one size and 1 (broadcast), over the operands."""
    seen: dict = {}
    for x, labels in zip(operands, inputs):
        for lab, n in zip(labels, x.shape):
            if n == 1:
                continue
            if seen.setdefault(lab, n) != n:
                name = "an ellipsis axis" if lab.startswith("..") else f"subscript {lab!r}"
                raise ValueError(f"einsum: operands could not be broadcast together: {name} has "
                                 f"{seen[lab]} and {n} elements")


@empty_aware
def einsum(*operands, out=None, dtype=None, order="K", casting="safe", optimize=False):
    """NumPy's ``einsum``: ``einsum("ij,jk->ik", a, b)``, implicit output (``"ij,jk"``),
    ``...`` broadcasting, and the sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.

    The subscripts become distributed operations: a repeated subscript in one operand is
    its diagonal (``"ii->i"``, ``"ii"`` the trace), a subscript in one operand only and
    not in the output is summed (``"ij->i"``), the operands are multiplied pairwise from
    the left, shared subscripts summed by ``matmul`` (``"ij,jk"``, ``"bij,bjk->bik"``) or
    by a product and a sum (``"i,i"``), the others by a broadcast product (``"i,j"``),
    and the result's axes are permuted into place (``"ij->ji"``). Sums keep the operands'
    dtype, as NumPy's einsum does; ``dtype`` casts the operands first (by ``casting``).
    ``optimize`` is accepted and changes nothing (pairs are taken from the left); a 0-d
    result is a 0-d DArray."""
    if out is not None:
        raise NotSupported("einsum(..., out=) is not supported by dgvm.array; assign the result instead")
    if order not in ("K", "A", "C", "F"):
        raise ValueError(f"einsum: order must be one of 'K', 'A', 'C', 'F', not {order!r}")
    if casting not in _CASTINGS:
        raise ValueError(f"einsum: casting must be one of {_CASTINGS}, not {casting!r}")
    if not operands:
        raise TypeError("einsum: no subscripts and no operands given")
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], list(operands[1:])
    else:
        subscripts, arrays = from_sublists(operands)
    if not arrays:
        raise ValueError("einsum: no operands given")
    for i, x in enumerate(arrays):
        if not isinstance(x, ArrayCore):
            raise TypeError(f"dgvm.array.einsum: operand {i} must be a DArray, not {type(x).__name__}")
    spec = parse(subscripts, [x.ndim for x in arrays])
    if dtype is not None:
        target = check(dtype)
        for i, x in enumerate(arrays):
            if not np.can_cast(x.dtype, target, casting=casting):
                raise TypeError(f"einsum: cannot cast operand {i} from {x.dtype} to {target} "
                                f"according to the rule {casting!r}")
        arrays = [x if x.dtype == target else apply("astype", x, dtype=target) for x in arrays]
    _label_sizes(arrays, spec.inputs)
    output = list(spec.output)
    # Each operand alone: diagonals, and sums over the labels no one else needs.
    reduced = []
    for i, (x, labels) in enumerate(zip(arrays, spec.inputs)):
        others = {lab for j, ls in enumerate(spec.inputs) if j != i for lab in ls}
        reduced.append(_reduced(x, labels, others | set(output)))
    cur, labels = reduced[0]
    for j in range(1, len(reduced)):
        later = {lab for _, ls in reduced[j + 1:] for lab in ls}
        cur, labels = _contracted(cur, labels, *reduced[j], later | set(output))
    cur, labels = _reduced(cur, labels, set(output))
    return _take_order(cur, labels, output)
