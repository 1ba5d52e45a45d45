"""Device backends, chosen by name: ``cpu``, ``cuda``, or ``auto``."""

from __future__ import annotations

from dgvm.backends.base import Backend
from dgvm.backends.cpu import CpuBackend
from dgvm.backends.cuda import CudaBackend, gpu_count
from dgvm.protocol.errors import DgvmError


def _registry() -> dict[str, type[Backend]]:
    return {"cpu": CpuBackend, "cuda": CudaBackend}


def resolve(name: str) -> str:
    """Turn "auto" into "cuda" when a GPU is visible, else "cpu"; check other names."""
    if name == "auto":
        return "cuda" if gpu_count() > 0 else "cpu"
    if name not in _registry():
        raise DgvmError(f"unknown backend {name!r}; available: auto, {', '.join(_registry())}")
    if name == "cuda" and gpu_count() == 0:
        raise DgvmError("backend 'cuda' asked but no CUDA GPU is visible (CuPy sees 0 devices)")
    return name


def create(name: str, capacity: int | None = None, speed: float | None = None) -> Backend:
    """Open the backend ``name`` ("auto" allowed) for this process's device."""
    return _registry()[resolve(name)](capacity=capacity, speed=speed)


__all__ = ["Backend", "create", "resolve", "gpu_count"]
