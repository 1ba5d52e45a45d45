"""``dgvm.array``: a NumPy-like array namespace over global device memory.

``import dgvm.array as np`` is the only change a NumPy program needs: every function of the
Python array API standard (2023.12) is here, plus the NumPy names programs use most. Arrays
are asynchronous: an operation allocates its result in the GVAT (colocated with its first
array input) and runs one task per worker where the chunks live. Elementwise results, basic
indexing and transposes are deferred until their values are needed, then run as one fused
pass, with the values they would have had if run at once.

Layout. The namespace is the union of the category files below, one per category of the
standard, each with its ``__all__``; ``linalg`` and ``fft`` (the standard's extensions)
and ``random`` are public submodules.
They sit over ``_engine/``, the machinery (the array's core and life cycle, deferred
trees, fusion, the blockwise ops and their tasks, placement, reuse of memory, arrays with
no elements, ...), which never imports them.

- ``array_object``: ``DArray`` (operators, indexing, methods, protocols)
- ``creation``, ``conversion`` (to and from NumPy and dask), ``data_types``,
  ``elementwise``, ``indexing``, ``linear_algebra``, ``manipulation``, ``searching``,
  ``sets``, ``sorting``, ``statistical``, ``utility``, ``constants``, ``info``
- NumPy's names beyond the standard's categories, by NumPy's own sections:
  ``cumulative`` (running sums and products, differences), ``order_statistics``
  (median, percentiles, quantiles), ``correlating`` (cov, corrcoef), ``histograms``
- ``interop``: NumPy's functions and ufuncs given DArrays (``__array_function__``)
"""

import sys as _sys

from dgvm.array import (  # noqa: F401  (linalg, fft, random: public submodules)
    array_object, constants, conversion, correlating, creation, cumulative, data_types,
    elementwise, fft, histograms, indexing, info, interop, linalg, linear_algebra, manipulation,
    order_statistics, random, searching, sets, sorting, statistical, utility,
)
from dgvm.array._engine import namespace as _namespace
from dgvm.array.array_object import *  # noqa: F401,F403
from dgvm.array.constants import *  # noqa: F401,F403
from dgvm.array.conversion import *  # noqa: F401,F403
from dgvm.array.correlating import *  # noqa: F401,F403
from dgvm.array.creation import *  # noqa: F401,F403
from dgvm.array.cumulative import *  # noqa: F401,F403
from dgvm.array.data_types import *  # noqa: F401,F403
from dgvm.array.elementwise import *  # noqa: F401,F403
from dgvm.array.histograms import *  # noqa: F401,F403
from dgvm.array.indexing import *  # noqa: F401,F403
from dgvm.array.info import *  # noqa: F401,F403
from dgvm.array.linear_algebra import *  # noqa: F401,F403
from dgvm.array.manipulation import *  # noqa: F401,F403
from dgvm.array.order_statistics import *  # noqa: F401,F403
from dgvm.array.searching import *  # noqa: F401,F403
from dgvm.array.sets import *  # noqa: F401,F403
from dgvm.array.sorting import *  # noqa: F401,F403
from dgvm.array.statistical import *  # noqa: F401,F403
from dgvm.array.utility import *  # noqa: F401,F403

_CATEGORIES = (
    array_object, constants, conversion, correlating, creation, cumulative, data_types,
    elementwise, histograms, indexing, info, linear_algebra, manipulation, order_statistics,
    searching, sets, sorting, statistical, utility,
)

__all__ = sorted({name for category in _CATEGORIES for name in category.__all__})

# DArray's __array_namespace__, __array_function__ and __array_ufunc__ answer with this
# namespace, which sits above DArray (it imports everything): handed in here, once.
_namespace.bind(_sys.modules[__name__], interop.array_function, interop.array_ufunc)
