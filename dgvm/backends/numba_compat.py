"""Work-arounds for known breaks between Numba, its CUDA target and NumPy."""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)


def patch_numpy_for_numba_cuda() -> None:
    """numba-cuda 0.30 calls ``np.row_stack`` at its first kernel compile; NumPy 2.5
    removed it. ``np.vstack`` is the same function, so give it that name back."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


def follow_numba_num_threads() -> None:
    """Make Numba's thread pool the size ``NUMBA_NUM_THREADS`` says *now*.

    Numba reads the thread count when it is imported. A Dask worker process started by a
    nanny imports the user's main module (and so Numba) before the nanny's environment
    (``NUMBA_NUM_THREADS`` from ``deploy.cpu_worker_env``) is applied, so without this
    every cpu worker launches one thread per core of the machine: two workers on two
    cores ran parallel kernels with four spinning OpenMP threads, 2-10x slower and erratic.
    Called once per worker, before any parallel code runs; a pool already started is left
    as it is (Numba cannot resize it).
    """
    # Numba takes 0.1 s to import: loaded in the worker that calls this, not by ``import dgvm``.
    import numba
    from numba.core import config as numba_config
    from numba.np.ufunc import parallel

    try:
        numba_config.reload_config()
    except RuntimeError as e:  # threads already launched with another count
        logger.info("Numba's thread pool keeps its size: %s", e)
        return
    wanted = numba_config.NUMBA_NUM_THREADS
    if getattr(parallel, "_is_initialized", True) or getattr(parallel, "NUM_THREADS", wanted) == wanted:
        return
    parallel.NUM_THREADS = wanted  # the count the pool will be launched with
    logger.debug("Numba's thread pool will have %d threads (%s)", wanted, numba.__version__)
