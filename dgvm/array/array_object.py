"""``DArray``: the array users hold, ``ArrayCore`` with its Python face.

``ArrayCore`` (``_engine/core.py``) is what the array is and holds: its allocation or
deferred tree, its life cycle, reads and writes from the caller. This class adds the
Python face: operators, indexing, where the blocks live, NumPy's array methods and the
protocols of Python, NumPy, DLPack and the array API. Each operator and method is the function of the
namespace that does the same (``x + y`` is ``add(x, y)``, ``x.sum()`` is ``sum(x)``,
``x[k]`` is ``_engine.getitem``), called directly.

Layering: the category files this module calls (``statistical``, ``manipulation``, ...)
sit below it. They, and the engine, make their results of the class of the arrays they
are given (``type(x).allocated(...)``) and never import this module; creation,
``conversion`` and ``random``, which make arrays from nothing, sit above it and name
DArray. The namespace as a whole (``dgvm.array``, for ``__array_namespace__`` and NumPy's
dispatch) sits above everything: the package hands it in (``_engine.namespace``).
"""

from __future__ import annotations

import math

import numpy as np

from dgvm.array import (
    cumulative, data_types, elementwise, indexing, info, linear_algebra, manipulation, searching,
    sorting, statistical, utility,
)
from dgvm.array._engine import namespace
from dgvm.array._engine.apply import apply
from dgvm.array._engine.complex_parts import part
from dgvm.array._engine.printing import array_format, array_repr, array_str
from dgvm.array._engine.core import ArrayCore
from dgvm.array._engine.getitem import getitem
from dgvm.array._engine.setitem import setitem
from dgvm.protocol import chunk_grid

__all__ = ["DArray"]


def _operand(other):
    """NotImplemented for operands that are not arrays or Python/NumPy scalars, so that
    Python tries the other side."""
    if isinstance(other, (ArrayCore, bool, int, float, complex, np.generic)):
        return other
    return NotImplemented


def _binary(op: str, fname: str):
    """``__op__``, ``__rop__`` and ``__iop__``: the elementwise function ``fname``."""

    def forward(self, other):
        other = _operand(other)
        return other if other is NotImplemented else apply(fname, self, other)

    def reflected(self, other):
        other = _operand(other)
        return other if other is NotImplemented else apply(fname, other, self)

    def inplace(self, other):
        other = _operand(other)
        return other if other is NotImplemented else apply(fname, self, other, out=self)

    for method, name in ((forward, f"__{op}__"), (reflected, f"__r{op}__"), (inplace, f"__i{op}__")):
        method.__name__ = name
        method.__qualname__ = f"DArray.{name}"
    return forward, reflected, inplace


def _unary(op: str, fname: str):
    def method(self):
        return apply(fname, self)

    method.__name__ = f"__{op}__"
    method.__qualname__ = f"DArray.__{op}__"
    return method


class DArray(ArrayCore):
    """A distributed array in global device memory.

    Block k (C order over the chunk grid) is chunk k of ``alloc``, stored contiguously
    in C order on its home worker. ``x.vaddr`` is the array's first global address.
    Its memory is freed with ``free()``, at the end of a ``with`` block, or when the
    last reference to it goes away (after the operations that use it).

    An elementwise result starts *deferred*: it has a shape, dtype and chunks but no
    allocation until something needs its values; touching ``alloc`` materializes it.
    Every operator runs as one distributed elementwise operation (fused with those that
    follow it).
    """

    __hash__ = object.__hash__  # comparisons are elementwise, identity stays hashable

    # -- operators ---------------------------------------------------------------------------
    __add__, __radd__, __iadd__ = _binary("add", "add")
    __sub__, __rsub__, __isub__ = _binary("sub", "subtract")
    __mul__, __rmul__, __imul__ = _binary("mul", "multiply")
    __truediv__, __rtruediv__, __itruediv__ = _binary("truediv", "divide")
    __floordiv__, __rfloordiv__, __ifloordiv__ = _binary("floordiv", "floor_divide")
    __mod__, __rmod__, __imod__ = _binary("mod", "remainder")
    __pow__, __rpow__, __ipow__ = _binary("pow", "pow")
    __and__, __rand__, __iand__ = _binary("and", "bitwise_and")
    __or__, __ror__, __ior__ = _binary("or", "bitwise_or")
    __xor__, __rxor__, __ixor__ = _binary("xor", "bitwise_xor")
    __lshift__, __rlshift__, __ilshift__ = _binary("lshift", "bitwise_left_shift")
    __rshift__, __rrshift__, __irshift__ = _binary("rshift", "bitwise_right_shift")
    __lt__ = _binary("lt", "less")[0]
    __le__ = _binary("le", "less_equal")[0]
    __gt__ = _binary("gt", "greater")[0]
    __ge__ = _binary("ge", "greater_equal")[0]
    __eq__ = _binary("eq", "equal")[0]
    __ne__ = _binary("ne", "not_equal")[0]
    __neg__ = _unary("neg", "negative")
    __pos__ = _unary("pos", "positive")
    __abs__ = _unary("abs", "abs")
    __invert__ = _unary("invert", "bitwise_invert")

    def __matmul__(self, other):
        return linear_algebra.matmul(self, other)

    def __rmatmul__(self, other):
        return linear_algebra.matmul(other, self)

    def __imatmul__(self, other):
        result = linear_algebra.matmul(self, other)
        if result.shape != self.shape:
            result.free()  # nothing left behind
            raise ValueError(f"in-place @ would change the shape {self.shape} to {result.shape}")
        self[...] = result
        return self

    # -- indexing ----------------------------------------------------------------------------
    def __getitem__(self, key):
        return getitem(self, key)

    def __setitem__(self, key, value):
        setitem(self, key, value)

    # -- the array API's attributes that are not data --------------------------------------
    @property
    def T(self):
        if self.ndim != 2:
            raise ValueError(f".T is for 2-d arrays (this one has {self.ndim}); use permute_dims")
        return manipulation.permute_dims(self, (1, 0))

    @property
    def mT(self):
        return linear_algebra.matrix_transpose(self)

    @property
    def device(self):
        return info.default_device()

    def to_device(self, device, /, *, stream=None):
        if device != info.default_device():
            raise ValueError(f"dgvm.array has one device, {info.default_device()!r}; asked {device!r}")
        return self

    def __array_namespace__(self, *, api_version=None):
        if api_version not in (None, "2023.12", "2022.12", "2021.12"):
            raise ValueError(f"dgvm.array implements array API 2023.12, not {api_version}")
        return namespace.bound().module

    # -- where the blocks live ---------------------------------------------------------------
    def locations(self) -> dict[tuple[int, ...], str]:
        """Block index -> address of the worker that holds it."""
        if self.size == 0:
            return {}  # held on the caller (zero_size)
        grid = self.numblocks
        self.alloc.ensure_fresh()
        return {
            chunk_grid.block_index(k, grid): self.alloc.home(k) for k in range(self.alloc.nchunks)
        }

    def chunk_info(self):
        """The ``ChunkInfo`` rows of the allocation behind the array."""
        return self.alloc.chunks

    def _chunk_indices(self, blocks) -> list[int]:
        """Chunk indices of ``blocks``: an int (chunk index), a block tuple, or a list."""
        grid = self.numblocks
        items = blocks if isinstance(blocks, list) else [blocks]
        out = []
        for b in items:
            if isinstance(b, tuple):
                if len(b) != len(grid) or not all(0 <= v < n for v, n in zip(b, grid)):
                    raise IndexError(f"block {b} is outside the block grid {grid}")
                b = chunk_grid.flat_index(b, grid)
            out.append(int(b))  # the GVAT checks chunk indices
        return out

    def migrate(self, blocks, worker: str) -> list[int]:
        """Move the home of ``blocks`` (a chunk index, a block tuple, or a list of them) to
        ``worker``, after the launches that use this array; returns the chunks moved."""
        self.settle()
        return self.alloc.migrate(self._chunk_indices(blocks), worker)

    # -- NumPy's array methods that programs use most --------------------------------------
    def sum(self, axis=None, dtype=None, *, keepdims=False):
        return statistical.sum(self, axis, dtype, keepdims=keepdims)

    def prod(self, axis=None, dtype=None, *, keepdims=False):
        return statistical.prod(self, axis, dtype, keepdims=keepdims)

    def mean(self, axis=None, dtype=None, *, keepdims=False):
        return statistical.mean(self, axis, dtype, keepdims=keepdims)

    def var(self, axis=None, dtype=None, *, ddof=None, keepdims=False, correction=None):
        return statistical.var(self, axis, dtype, correction=correction, keepdims=keepdims, ddof=ddof)

    def std(self, axis=None, dtype=None, *, ddof=None, keepdims=False, correction=None):
        return statistical.std(self, axis, dtype, correction=correction, keepdims=keepdims, ddof=ddof)

    def max(self, axis=None, *, keepdims=False):
        return statistical.max(self, axis, keepdims=keepdims)

    def min(self, axis=None, *, keepdims=False):
        return statistical.min(self, axis, keepdims=keepdims)

    def all(self, axis=None, *, keepdims=False):
        return utility.all(self, axis, keepdims=keepdims)

    def any(self, axis=None, *, keepdims=False):
        return utility.any(self, axis, keepdims=keepdims)

    def argmax(self, axis=None, *, keepdims=False):
        return searching.argmax(self, axis, keepdims=keepdims)

    def argmin(self, axis=None, *, keepdims=False):
        return searching.argmin(self, axis, keepdims=keepdims)

    def cumsum(self, axis=None, dtype=None):
        return cumulative.cumsum(self, axis, dtype)

    def cumprod(self, axis=None, dtype=None):
        return cumulative.cumprod(self, axis, dtype)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True, *, device=None):
        """NumPy's ``astype`` (``dtype`` by keyword too: ``x.astype(dtype=...)``)."""
        return data_types.array_astype(self, dtype, order, casting, subok, copy, device=device)

    def sort(self, axis=-1, kind=None, order=None) -> None:
        """Sort in place along ``axis``, as NumPy's method does (stable, NaN last)."""
        self[...] = sorting.sort(self, axis, kind, order)

    def argsort(self, axis=-1, kind=None, order=None):
        return sorting.argsort(self, axis, kind, order)

    def swapaxes(self, axis1, axis2):
        return manipulation.swapaxes(self, axis1, axis2)

    def copy(self):
        return data_types.astype(self, self.dtype, copy=True)

    def clip(self, /, min=None, max=None):  # noqa: A002  (the standard's names)
        return elementwise.clip(self, min, max)

    def dot(self, b, /):
        return linear_algebra.dot(self, b)

    def repeat(self, repeats, /, *, axis=None):
        return manipulation.repeat(self, repeats, axis=axis)

    def take(self, indices, /, *, axis=None):
        return indexing.take(self, indices, axis=axis)

    def squeeze(self, /, axis):
        return manipulation.squeeze(self, axis)

    def reshape(self, *shape, copy=None):
        return manipulation.reshape(self, shape[0] if len(shape) == 1 else shape, copy=copy)

    def transpose(self, *axes):
        return manipulation.transpose(self, (axes[0] if len(axes) == 1 else axes) if axes else None)

    def flatten(self):
        """A copy of the elements in one axis, C order."""
        return self.reshape(-1, copy=True)

    def ravel(self, order="C"):
        """The elements in one axis: a view where NumPy's is one."""
        return manipulation.ravel(self, order)

    @property
    def real(self):
        """The real part: a view of this array's memory, as NumPy's."""
        return part(self, "real")

    @property
    def imag(self):
        """The imaginary part: a view of this array's memory (read-only zeros for a real
        array), as NumPy's."""
        return part(self, "imag")

    def fill(self, value) -> None:
        self[...] = value

    def tolist(self):
        return self.to_numpy().tolist()

    # -- Python's protocols ------------------------------------------------------------------
    def __str__(self) -> str:
        return array_str(self)

    def __repr__(self) -> str:
        return array_repr(self)

    def __format__(self, spec: str) -> str:
        return array_format(self, spec)

    def describe(self) -> str:
        """Where the array stands: shape, dtype, blocks, and its global address (or
        whether it is deferred or a view), without reading any value."""
        return ArrayCore.__repr__(self)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DArray")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d DArray")
        for i in range(self.shape[0]):
            yield self[i]

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer DArrays can be used as an index, not {self.dtype}")
        return int(self._scalar("index"))

    def _scalar(self, what: str):
        if self.size != 1:
            raise TypeError(f"{what}() of a DArray needs one element; this one has shape {self.shape}")
        return self.item()

    # -- NumPy's and DLPack's protocols ------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a DArray lives in device memory: np.asarray(x) always copies")
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return namespace.bound().array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return namespace.bound().array_function(func, types, args, kwargs)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export of a single-chunk array (its one chunk, gathered to the caller as
        a NumPy array when ``copy`` allows): a DArray of several chunks is not one buffer."""
        nchunks = math.prod(self.numblocks)  # known without storing a deferred array
        if nchunks != 1:
            raise BufferError(f"__dlpack__ needs a single-chunk DArray; this one has {nchunks} chunks")
        if copy is False:
            raise BufferError("__dlpack__(copy=False): the chunk lives on a worker, not in this process")
        return self.to_numpy().__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: what __dlpack__ gives the caller is host memory
