"""``dgvm.array``: a NumPy-like array namespace over global device memory.

``import dgvm.array as np`` is the only change a NumPy program needs: every function of the
Python array API standard (2023.12) is here, plus the NumPy names programs use most. Arrays
are asynchronous: an operation allocates its result in the GVAT (colocated with its first
array input) and runs one task per worker where the chunks live. Elementwise results, basic
indexing and transposes are deferred until their values are needed, then run as one fused
pass (``dgvm.array._engine.deferred``), with the values they would have had if run at once.
"""

from dgvm.array.creation import (
    arange, asarray, asnumpy, empty, empty_like, eye, from_dask, from_dlpack, from_numpy, full, full_like,
    linspace, meshgrid, ones, ones_like, to_dask, tril, triu, zeros, zeros_like,
)
from dgvm.array.darray import DArray
from dgvm.array.diagonals import diag, diagonal, trace
from dgvm.array.dtypes import (
    bool, can_cast, complex64, complex128, finfo, float32, float64, iinfo, int8, int16, int32,
    int64, isdtype, result_type, uint8, uint16, uint32, uint64,
)
from dgvm.array.elementwise import FUNCTIONS as _ELEMENTWISE, astype, clip, where
from dgvm.array.info import __array_namespace_info__
from dgvm.array.linalg import dot, matmul, outer, tensordot, vecdot
from dgvm.array.manipulation import (
    broadcast_arrays, broadcast_to, concat, concatenate, expand_dims, flip, matrix_transpose,
    moveaxis, permute_dims, rechunk, repeat, reshape, roll, squeeze, stack, take, tile,
    transpose, unstack,
)
from dgvm.array.reductions import (
    all, any, argmax, argmin, cumulative_sum, max, mean, min, prod, std, sum, var,
)
from dgvm.array.searching import count_nonzero, nonzero, searchsorted
from dgvm.array.sets import unique_all, unique_counts, unique_inverse, unique_values
from dgvm.array.sorting import argsort, sort
from dgvm.array import random  # noqa: E402  (dgvm.array.random.default_rng, seed, ...)
from dgvm.array import linalg  # noqa: E402  (dgvm.array.linalg.norm, ...)

globals().update(_ELEMENTWISE)

# Arrays with no elements are held on the caller and computed with NumPy: every function
# here answers for them (dgvm/array/zero_size.py).
from dgvm.array import indexing as _indexing  # noqa: E402
from dgvm.array._engine import zero_size as _zero_size
import numpy as _np  # noqa: E402

_zero_size.install(globals(), skip=_ELEMENTWISE)
_zero_size.install(vars(linalg), numpy=_np.linalg, defined_in="dgvm.array.linalg")
_indexing.setitem = _zero_size.aware(_indexing.setitem)  # DArray.__setitem__ calls it there

import math as _math  # noqa: E402

e, pi, inf, nan, newaxis = _math.e, _math.pi, _math.inf, _math.nan, None

__array_api_version__ = "2023.12"
