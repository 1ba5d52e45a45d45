"""Inspection: ``__array_namespace_info__`` (what dgvm.array offers) and the API version."""

from __future__ import annotations

import numpy as np

from dgvm.array._engine.dtypes import SUPPORTED, isdtype

__all__ = ["__array_api_version__", "__array_namespace_info__"]

__array_api_version__ = "2023.12"

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
        return {"real floating": np.dtype("float64"), "complex floating": np.dtype("complex128"),
                "integral": np.dtype("int64"), "indexing": np.dtype("int64")}

    def dtypes(self, *, device=None, kind=None) -> dict:
        chosen = [d for d in SUPPORTED if kind is None or isdtype(d, kind)]
        return {np.dtype(d).name: d for d in chosen}


def __array_namespace_info__() -> Info:
    return Info()
