"""The namespace DArrays belong to, ``dgvm.array``, for the methods that answer with it.

``x.__array_namespace__()`` returns it, and NumPy's functions and ufuncs given a DArray
dispatch to its functions (``__array_function__``, ``__array_ufunc__``:
``dgvm.array.interop``). That namespace imports every category of functions, and some
of them make DArrays from nothing (creation), so DArray's module cannot import it: the
package hands it in, once, as the last step of ``dgvm/array/__init__.py`` (``bind``).
It is the same namespace for every client, so this is set once per process.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Namespace:
    module: types.ModuleType  # dgvm.array
    array_function: Callable  # (func, types, args, kwargs) -> result or NotImplemented
    array_ufunc: Callable  # (ufunc, method, inputs, kwargs) -> result


_bound: list[Namespace] = []  # the one bound namespace, once dgvm.array is imported


def bind(module: types.ModuleType, array_function: Callable, array_ufunc: Callable) -> None:
    """Hand in the namespace (``dgvm/array/__init__.py``, when it is imported)."""
    _bound[:] = [Namespace(module, array_function, array_ufunc)]


def bound() -> Namespace:
    """The namespace handed in (``dgvm.array`` is imported before any DArray exists)."""
    return _bound[0]
