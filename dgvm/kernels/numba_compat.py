"""Work-arounds for known breaks between Numba's CUDA target and NumPy."""

from __future__ import annotations

import numpy as np


def patch_numpy_for_numba_cuda() -> None:
    """numba-cuda 0.30 calls ``np.row_stack`` at its first kernel compile; NumPy 2.5
    removed it. ``np.vstack`` is the same function, so give it that name back."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
