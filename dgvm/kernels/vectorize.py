"""``@dgvm.vectorize``: elementwise functions over DArrays, compiled with Numba.

On ``cuda`` the ufunc is built for the ``cuda`` target and runs on the chunks in GPU
memory; on ``cpu`` it is Numba's compiled CPU ufunc. The result is a new DArray colocated
with the first array argument; scalars broadcast.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import numpy as np
from distributed import get_worker

from dgvm.kernels.access import Access, ArraySpec
from dgvm.kernels.launch import _check_args, _is_array
from dgvm.kernels.numba_compat import patch_numpy_for_numba_cuda


class Vectorized:
    def __init__(self, pyfunc, signatures):
        self.pyfunc = pyfunc
        self.signatures = list(signatures)
        self.name = pyfunc.__name__
        self._ufuncs = {}

    def __getstate__(self):
        return {"pyfunc": self.pyfunc, "signatures": self.signatures}

    def __setstate__(self, state):
        self.__init__(state["pyfunc"], state["signatures"])

    def ufunc(self, backend: str):
        u = self._ufuncs.get(backend)
        if u is None:
            import numba

            if backend == "cuda":
                patch_numpy_for_numba_cuda()
                u = numba.vectorize(self.signatures, target="cuda")(self.pyfunc)
            else:
                u = numba.vectorize(self.signatures)(self.pyfunc)
            self._ufuncs[backend] = u
        return u

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
        specs = [("array", ArraySpec.of(a)) if _is_array(a) else ("scalar", a) for a in args]
        by_worker = defaultdict(list)
        for k in range(out.alloc.nchunks):
            by_worker[out.alloc.home(k)].append(k)
        deps = [f for a in arrays for f in a._writes]
        client = out.alloc.client
        futures = [
            client.submit(
                _vectorize_here, self, ArraySpec.of(out), specs, idx, deps,
                workers=[w], allow_other_workers=False, pure=False,
                key=f"dgvm-vectorize-{self.name}-{uuid.uuid4().hex[:10]}",
            )
            for w, idx in by_worker.items()
        ]
        out._writes = futures
        for a in arrays:
            a._reads = a._reads + futures
        return out


def _vectorize_here(vec, out: ArraySpec, specs, indices, deps):
    from distributed.utils import sync

    worker = get_worker()
    store = worker.extensions["dgvm"]
    access = Access(worker, store)
    ufunc = vec.ufunc(store.backend.name)
    for k in indices:
        with store.lock:
            args = [access.chunk(v, k) if kind == "array" else v for kind, v in specs]
            target = access.chunk(out, k)
            target[...] = ufunc(*args)
        store.backend.synchronize()
    sync(worker.loop, worker.scheduler.dgvm_launched, alloc_id=out.alloc_id,
         wrote=list(indices), reads={str(a): c for a, c in access.reads.items()})
    return len(indices)


def vectorize(signatures):
    """Decorator: ``@dgvm.vectorize(["float64(float64, float64)"])``."""

    def wrap(pyfunc):
        return Vectorized(pyfunc, signatures)

    return wrap
