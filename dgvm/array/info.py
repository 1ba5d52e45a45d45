"""``__array_namespace_info__``: what dgvm.array offers (array API inspection)."""

from __future__ import annotations

import numpy as np

from dgvm.array import dtypes

DEVICE = "dgvm"


def default_device() -> str:
    """dgvm.array has one device: the cluster's global memory."""
    return DEVICE


class Info:
    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> str:
        return DEVICE

    def devices(self) -> list[str]:
        return [DEVICE]

    def default_dtypes(self, *, device=None) -> dict:
        return {"real floating": dtypes.float64, "complex floating": dtypes.complex128,
                "integral": dtypes.int64, "indexing": dtypes.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        chosen = [d for d in dtypes.SUPPORTED if kind is None or dtypes.isdtype(d, kind)]
        return {np.dtype(d).name: d for d in chosen}


def __array_namespace_info__() -> Info:
    return Info()
