"""Blockwise ops of the fft extension: transforms along axes each chunk holds whole.

A discrete Fourier transform along an axis needs every element of that axis, so a pass
of transforms makes a result whose chunks hold the transformed axes whole (the other
axes keep the input's cuts, cut finer where a block would grow past ``limit_bytes``).
Each result chunk is made on the worker holding the input chunk of its first element;
it reads the input region it needs (a view of a local chunk when the input already
holds those axes whole, else the pieces of the axis gathered through the migration
layer, as a rechunk reads them) and runs the transforms with ``xp.fft``: NumPy's
pocketfft on ``cpu``, cuFFT through CuPy on GPUs.

The 1-d transforms of an n-d function run in NumPy's order, consecutive ones in one
pass where the pass's input holds their axes whole already (``joins``): ``fftn`` of an
array whose chunks hold whole planes is one local pass, and each axis cut across
chunks costs a pass of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dask.config
import numpy as np
from dask.utils import parse_bytes


@dataclass(frozen=True)
class Step:
    """One 1-d transform: ``xp.fft.<name>(a, n=n, axis=axis, norm=norm)``."""

    name: str  # fft, ifft, rfft, irfft, hfft, ihfft
    axis: int  # non-negative
    n: int  # transform length (the output's along axis: n, or n // 2 + 1 for rfft/ihfft)

    def reads(self) -> int:
        """Input elements along ``axis`` the transform uses (the rest are cropped)."""
        return self.n // 2 + 1 if self.name in ("irfft", "hfft") else self.n

    def out_length(self) -> int:
        return self.n // 2 + 1 if self.name in ("rfft", "ihfft") else self.n


@dataclass
class FFTPass:
    """Steps run one after the other on each result chunk; ``reads``: per transformed
    axis, how many of its input elements are read (from 0); ``cast``: the dtype the
    first step takes, as NumPy casts to it (complex for ``fft``, real for ``rfft``;
    integers and bool as float64); ``dtype``: the result's."""

    steps: tuple  # Step, in order
    norm: str
    reads: tuple  # (axis, count) per transformed axis
    cast: object
    dtype: object

    def block(self, read, lo, hi, xp):
        ilo, ihi = list(lo), list(hi)
        for axis, count in self.reads:
            ilo[axis], ihi[axis] = 0, count
        a = read(0, ilo, ihi)
        a = a.astype(self.cast, copy=False)
        for s in self.steps:
            a = getattr(xp.fft, s.name)(a, n=s.n, axis=s.axis, norm=self.norm)
        return a.astype(self.dtype, copy=False)


def joins(step: Step, pending, chunks) -> bool:
    """Whether ``step`` runs in the pass of the steps ``pending`` (whose input is cut
    into ``chunks``): when that input holds its axis whole, or an earlier step of the
    pass transforms that axis (the pass's result holds it whole). A pass gathers at most
    one cut axis, so that the other axes stay spread over the workers."""
    return bool(pending) and (len(chunks[step.axis]) == 1 or any(t.axis == step.axis for t in pending))


def reads_of(steps, shape) -> tuple:
    """Per axis a pass transforms: the input elements read, from its first step there."""
    reads: dict[int, int] = {}
    for s in steps:
        reads.setdefault(s.axis, min(shape[s.axis], s.reads()))
    return tuple(reads.items())


def limit_bytes(chunks, itemsize: int) -> int:
    """The largest block a pass's result may have before its other axes are cut finer:
    the input's largest block (``chunks``) in the result's ``itemsize``, or Dask's chunk
    size for "auto" where that is larger."""
    largest = math.prod(max(c) for c in chunks)
    return max(largest * itemsize, parse_bytes(dask.config.get("array.chunk-size")))


def pass_chunks(chunks, lengths: dict, itemsize: int, limit: int) -> tuple:
    """Chunks of a pass's result: the axes in ``lengths`` whole at their new length, the
    others cut as in ``chunks``, cut finer, outer axes first, where a block of
    ``itemsize``-byte elements would exceed ``limit`` bytes."""
    out = [(lengths[a],) if a in lengths else tuple(c) for a, c in enumerate(chunks)]
    for a in range(len(out)):
        if a in lengths:
            continue
        rest = math.prod(max(c) for b, c in enumerate(out) if b != a) * itemsize
        per = max(1, limit // max(rest, 1))
        if max(out[a]) > per:
            out[a] = tuple(p for c in out[a] for p in split(c, per))
    return tuple(out)


def split(n: int, most: int) -> list[int]:
    """``n`` cut into near-equal parts of at most ``most``."""
    k = -(-n // most)
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def complex_of(dtype) -> np.dtype:
    """The complex dtype a transform of ``dtype`` gives: complex64 from float32 and
    complex64, else complex128 (integers and bool are transformed as float64)."""
    return np.dtype(np.complex64 if np.dtype(dtype) in (np.float32, np.complex64) else np.complex128)


def real_of(dtype) -> np.dtype:
    """The real dtype of the same precision as ``complex_of(dtype)``."""
    return np.dtype(np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64)
