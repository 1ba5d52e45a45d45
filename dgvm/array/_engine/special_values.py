"""The standard's special values where the libraries under dgvm give others.

The array API standard fixes what each elementwise function returns at infinities, NaNs
and signed zeros. The libraries dgvm runs on follow it, but for two complex functions:

- ``expm1``: NumPy computes ``expm1(a) cos(b) - 2 sin²(b/2) + i exp(a) sin(b)``, which
  makes a NaN of ``inf * 0`` or ``-1 * nan`` where the standard has a number (also on the
  real axis once ``exp(a)`` overflows), a ``-0`` real part at ``-0 + 0j``, and
  ``-0.9999999`` for ``-1`` in single precision at ``-inf + bj``. CuPy's gives the
  standard's values at the infinities and NaNs (seen on the GPU machines).
- ``tanh`` at ``±inf + bj``: ``±1 ± 0j`` with the zero of ``sin(2b)``'s sign, as C99 says,
  where the standard has ``b``'s.

The library's value is kept everywhere else (``expm1``'s is accurate near zero, where
``exp(z) - 1`` is not) and the special inputs get the standard's result. The same
corrections run on NumPy and CuPy chunks, so cpu and cuda workers agree whatever their
library does. Each function in ``FIXED`` takes the namespace and its argument, so the same
code runs on NumPy chunks, on CuPy chunks and inside a ``cupy.fuse`` trace.
"""

from __future__ import annotations

import math

import numpy as np


def _expm1(xp, z):
    out = xp.expm1(z)
    re, im = xp.real(z), xp.imag(z)
    # The real axis: expm1(a) ± 0j. The formula makes NaN of exp(a) sin(0) once exp(a)
    # overflows, and -0 of expm1(-0), where the standard has +0. (A subtraction keeps the
    # imaginary zero's sign, an addition would not.)
    out = xp.where((im == 0) & xp.isfinite(re), (z - re) - (-xp.expm1(re)), out)
    # inf ± 0j and nan ± 0j are their own expm1.
    out = xp.where((im == 0) & ((re == math.inf) | xp.isnan(re)), z, out)
    # -inf + bj for any b, and inf + (inf or nan)j: the formula multiplies an infinity
    # by 0 or NaN, and exp(z) - 1 is the standard's value there, signs included (no
    # literal infinity either: cupy.fuse cannot spell one for a complex constant).
    return xp.where((re == -math.inf) | ((re == math.inf) & ~xp.isfinite(im)), xp.exp(z) - 1, out)


def _tanh(xp, z):
    out = xp.tanh(z)
    # ±inf + bj, b finite: ±1 + 0j with the zero of b's sign (the standard's 1 + 0j for
    # b > 0, and its symmetries); C99's, which both libraries follow, takes sin(2b)'s.
    flip = xp.isinf(xp.real(z)) & xp.isfinite(xp.imag(z)) & (xp.signbit(xp.imag(out)) != xp.signbit(xp.imag(z)))
    return xp.where(flip, xp.conj(out), out)  # conj changes only the zero's sign here


#: function name -> the standard's version for complex arguments
FIXED = {"expm1": _expm1, "tanh": _tanh}


def applies(name: str, dtype) -> bool:
    """Whether ``name`` with a result of ``dtype`` needs the standard's version."""
    return name in FIXED and np.dtype(dtype).kind == "c"


def call(xp, name: str, args):
    """``name`` over ``args`` (arrays) with the standard's special values."""
    return FIXED[name](xp, *args)
