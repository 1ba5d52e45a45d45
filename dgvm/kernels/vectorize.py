"""``@dgvm.vectorize``: elementwise functions over DArrays, compiled with Numba.

On ``cuda`` the ufunc is built for the ``cuda`` target and runs on the chunks in GPU
memory; on ``cpu`` it is Numba's compiled CPU ufunc. The result is a new DArray colocated
with the first array argument; scalars broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from dgvm.array import DArray
from dgvm.array._engine import blockwise
from dgvm.array.creation import empty
from dgvm.backends.numba_compat import patch_numpy_for_numba_cuda
from dgvm.kernels.cache import compiled_once, new_key
from dgvm.kernels.launch import check_args


class Vectorized:
    def __init__(self, pyfunc, signatures, key: str | None = None):
        self.pyfunc = pyfunc
        self.signatures = list(signatures)
        self.name = pyfunc.__name__
        self.key = key or new_key(self.name)

    def __getstate__(self):  # ship the Python function only; workers compile their own
        return {"pyfunc": self.pyfunc, "signatures": self.signatures, "key": self.key}

    def __setstate__(self, state):
        self.__init__(state["pyfunc"], state["signatures"], state["key"])

    def ufunc(self, backend: str):
        return compiled_once(self.key, backend, lambda: self._build(backend))

    def _build(self, backend: str):
        if backend == "cuda":
            patch_numpy_for_numba_cuda()
            return numba.vectorize(self.signatures, target="cuda")(self.pyfunc)
        return numba.vectorize(self.signatures)(self.pyfunc)

    def result_dtype(self, args) -> np.dtype:
        """The output dtype of the signature NumPy's rules pick for these arguments."""
        samples = [np.zeros(1, a.dtype) if isinstance(a, DArray) else a for a in args]
        return self.ufunc("cpu")(*samples).dtype

    def __call__(self, *args):
        arrays = [a for a in args if isinstance(a, DArray)]
        if not arrays:
            raise TypeError(f"{self.name} needs at least one dgvm DArray argument")
        first = arrays[0]
        check_args(args, first)
        out = empty(first.shape, self.result_dtype(args), chunks=first.chunks, colocate=first)
        layout, n = [], 0
        for a in args:  # array arguments by their position in ``arrays``, scalars as they are
            layout.append(("array", n) if isinstance(a, DArray) else ("scalar", a))
            n += isinstance(a, DArray)
        blockwise.run(_UfuncOp(self, layout), out, arrays, f"vectorize-{self.name}")
        return out


@dataclass
class _UfuncOp:
    """Blockwise op of a vectorized function: every argument has the output's chunks."""

    vec: Vectorized
    layout: list

    def block(self, read, lo, hi, xp):
        backend = "cuda" if xp.__name__.startswith("cupy") else "cpu"
        args = [read(v, lo, hi) if kind == "array" else v for kind, v in self.layout]
        return self.vec.ufunc(backend)(*args)


def vectorize(signatures):
    """Decorator: ``@dgvm.vectorize(["float64(float64, float64)"])``."""

    def wrap(pyfunc):
        return Vectorized(pyfunc, signatures)

    return wrap
