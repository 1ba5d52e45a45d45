"""Kernels where the data lives: ``dgvm.kernel``, ``dgvm.launch``, ``dgvm.vectorize``,
``dgvm.blocks``, and the compilers behind them.

- ``kernel``: ``@dgvm.kernel`` (``Kernel``), compiled on the workers that run it, per
  backend: Numba's CUDA target on ``cuda``; on ``cpu``, the CPU compiler (or Numba's
  CUDA simulator);
- ``cpu``: the CPU compiler of kernels written against ``numba.cuda``;
- ``cache``: compiled code, once per worker process;
- ``launch``: ``dgvm.launch`` (one task per worker of the output's chunks) and
  ``dgvm.wait``; ``blocks``: ``dgvm.blocks`` (chosen blocks as a launch argument);
- ``vectorize``: ``@dgvm.vectorize``, Numba ufuncs over DArrays.

Kernels sit above ``dgvm.array`` (they take DArrays) and import it at the top.
"""
