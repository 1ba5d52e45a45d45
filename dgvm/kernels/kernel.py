"""``@dgvm.kernel``: a Numba CUDA kernel that dgvm compiles on the workers that run it.

On ``cuda`` it is a real GPU kernel (``numba.cuda.jit``). On ``cpu``, a kernel that only
uses thread indexing runs as compiled, parallel Numba CPU code; any other kernel runs in
Numba's CUDA simulator, with a one-time warning that says why.
"""

from __future__ import annotations

import warnings

from dgvm.backends.numba_compat import patch_numpy_for_numba_cuda
from dgvm.kernels.cache import compiled_once, new_key
from dgvm.kernels.cpu import Unsupported, compile_cpu, source_of


class Kernel:
    """A kernel written against ``numba.cuda``; compiled lazily, once per process and
    backend (Numba adds one specialization per argument signature)."""

    def __init__(self, pyfunc, key: str | None = None, source: str | None = None):
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self.key = key or new_key(self.name)
        # Read where it is defined and shipped with it: a worker reading the file later
        # would find other lines there once the file is edited.
        self.source = source if source is not None else source_of(getattr(pyfunc, "py_func", pyfunc))

    def __getstate__(self):  # ship the Python function only; workers compile their own
        return {"pyfunc": self.pyfunc, "key": self.key, "source": self.source}

    def __setstate__(self, state):
        self.__init__(state["pyfunc"], state["key"], state.get("source"))

    def compiled(self, backend: str):
        return compiled_once(self.key, backend, lambda: _COMPILERS[backend](self.pyfunc, self.source))

    def run(self, backend: str, griddim, blockdim, args) -> None:
        self.compiled(backend)(griddim, blockdim, *args)

    def may_fail_halfway(self, backend: str) -> bool:
        """Whether a launch on ``backend`` can fail after writing part of its output
        (then ``dgvm.launch`` runs it on a copy of the chunk, so that the chunk stays as
        it was). Never on ``cuda``: a kernel either fails before it starts (compiling,
        launching) or runs to its end (Numba CUDA kernels do not raise; a device fault
        ends the CUDA context, and every chunk of the device with it)."""
        if backend == "cuda":  # the caller need not compile it to know
            return False
        return getattr(self.compiled(backend), "may_raise", True)

    def __repr__(self):
        return f"<dgvm.kernel {self.name}>"


def _compile_cuda(pyfunc, source=None):
    patch_numpy_for_numba_cuda()
    from numba import cuda  # optional: CUDA, only where a kernel is compiled for a cuda worker

    jitted = cuda.jit(pyfunc)

    def run(griddim, blockdim, *args):
        jitted[griddim, blockdim](*args)

    return run


# Kernels already warned about (once per process: a warning, not state of a connection).
_warned: set[str] = set()


def _compile_cpu(pyfunc, source=None):
    try:
        return compile_cpu(pyfunc, source)
    except Unsupported as e:
        if pyfunc.__name__ not in _warned:
            _warned.add(pyfunc.__name__)
            warnings.warn(
                f"dgvm kernel {pyfunc.__name__!r} runs in the Numba CUDA simulator on the cpu "
                f"backend (slow): {e}",
                stacklevel=2,
            )
        return _simulated(pyfunc)


def _simulated(pyfunc):
    # Here, not at the top: only kernels the CPU compiler cannot run need Numba's CUDA
    # simulator, whose import is slow and patches numba.cuda.
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    sim = FakeCUDAKernel(pyfunc, device=False, fastmath=False)

    def run(griddim, blockdim, *args):
        # Pre-wrapped arrays bypass the real CUDA driver the simulator would otherwise
        # look for when numba.cuda was imported without NUMBA_ENABLE_CUDASIM.
        wrapped = [FakeCUDAArray(a) if hasattr(a, "__array_interface__") and a.ndim else a for a in args]
        sim[griddim, blockdim](*wrapped)

    return run


_COMPILERS = {"cuda": _compile_cuda, "cpu": _compile_cpu}


def kernel(pyfunc) -> Kernel:
    """Decorator: turn a function written against ``numba.cuda`` into a dgvm kernel."""
    if not callable(pyfunc) or not hasattr(pyfunc, "__name__"):
        raise TypeError(f"dgvm.kernel decorates a function, got {type(pyfunc).__name__} {pyfunc!r:.60}")
    return Kernel(pyfunc)
