"""``@dgvm.vectorize``: elementwise functions over DArrays, compiled with Numba.

On ``cuda`` the ufunc is built for the ``cuda`` target and runs on the chunks in GPU
memory; on ``cpu`` it is Numba's compiled CPU ufunc. The result is a new DArray colocated
with the first array argument; scalars broadcast.
"""

from __future__ import annotations

import numpy as np
from distributed import get_worker

from dgvm.kernels.access import Access, ArraySpec
from dgvm.kernels.cache import compiled_once, new_key
from dgvm.kernels.launch import _check_args, _is_array, _spec, dispatch, report
from dgvm.kernels.numba_compat import patch_numpy_for_numba_cuda


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
        import numba

        if backend == "cuda":
            patch_numpy_for_numba_cuda()
            return numba.vectorize(self.signatures, target="cuda")(self.pyfunc)
        return numba.vectorize(self.signatures)(self.pyfunc)

    def result_dtype(self, args) -> np.dtype:
        """The output dtype of the signature NumPy's rules pick for these arguments."""
        samples = [np.zeros(1, a.dtype) if _is_array(a) else a for a in args]
        return self.ufunc("cpu")(*samples).dtype

    def __call__(self, *args):
        from dgvm.array import empty

        arrays = [a for a in args if _is_array(a)]
        if not arrays:
            raise TypeError(f"{self.name} needs at least one dgvm DArray argument")
        first = arrays[0]
        _check_args(args, first)
        out = empty(first.shape, self.result_dtype(args), chunks=first.chunks, colocate=first)
        specs = [_spec(a) for a in args]
        dispatch(_vectorize_here, out, arrays, f"vectorize-{self.name}", self, ArraySpec.of(out), specs)
        return out


def _vectorize_here(vec, out: ArraySpec, specs, indices, deps):
    worker = get_worker()
    store = worker.extensions["dgvm"]
    access = Access(worker, store)
    ufunc = vec.ufunc(store.backend.name)
    for k in indices:
        with access.output_chunk():
            args = [access.chunk(v, k) if kind == "array" else v for kind, v in specs]
            target = access.chunk(out, k)
            target[...] = ufunc(*args)
        store.backend.synchronize()
    report(worker, out, indices, access)
    return len(indices)


def vectorize(signatures):
    """Decorator: ``@dgvm.vectorize(["float64(float64, float64)"])``."""

    def wrap(pyfunc):
        return Vectorized(pyfunc, signatures)

    return wrap
