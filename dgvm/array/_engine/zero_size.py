"""Arrays with no elements: held on the caller, computed with NumPy.

The standard covers shapes with a zero in them (``zeros((0, 3))``, ``x[5:2]``, the
indices of ``nonzero`` where nothing is), but a GVAT allocation holds at least one byte:
there is nothing to place. So an array of size 0 is a host value (``deferred.hold``) of
``numpy.empty(shape, dtype)`` with one empty block per axis, and never touches a worker.

Every public function of ``dgvm.array`` is wrapped (``install``):

- given an array of size 0 among its arguments, the function runs on the caller with
  NumPy's function of the same name (the standard's names are NumPy 2's). Arrays with
  elements given alongside enter as stand-ins that hold no memory (a zero broadcast to
  their shape): a result with no elements (``x[empty_index]``, ``take(x, empty)``)
  needs none of their values. A result with elements that depends on them
  (``where(empty_mask, x, y)`` cannot, ``outer(x, empty)`` has none) is computed again
  from their values only when they are small (``GATHER_LIMIT``); otherwise the call
  raises ``DgvmError`` rather than gather them. Results are made DArrays again: stored
  in the GVAT when they have elements (``zeros((3, 0)) @ zeros((0, 4))``,
  ``sum(zeros(0))``), host values when not. ``concat`` reads only the arrays with
  elements itself, and elementwise operations need nothing computed;
- a function whose result has no elements although its arguments do (``arange(0)``,
  ``x[5:2]`` computed, ``zeros((0, 3))``) meets ``NoElements`` where it allocates that
  result, and answers the empty array instead.
"""

from __future__ import annotations

import functools
import inspect
import sys

import numpy as np

from dgvm.array.darray import DArray
from dgvm.protocol.errors import DgvmError

# dgvm's own keywords (placement, chunks, the client), and the standard's that NumPy's
# functions lack, where they make no difference to an array with no elements.
_NOT_NUMPYS = {"chunks", "placement", "colocate", "client", "device", "descending", "copy"}
GATHER_LIMIT = 1 << 20  # elements of arrays with elements a mixed call may gather


def _setitem(x, key, value):
    # Nothing to write (the target or the value has no elements): NumPy's broadcast
    # check only, on x's stand-in (read, never written).
    np.broadcast_to(value, np.shape(x[key]))


# Functions with no NumPy function of their name.
def _repeat(x, repeats, axis=None):
    from dgvm.array.manipulation import repeat_counts

    return np.repeat(x, repeat_counts(repeats), axis=axis)


_HOST = {"setitem": _setitem, "repeat": _repeat}
# Functions whose result is a list in dgvm.array (NumPy 2 answers a tuple).
_LISTS = {"broadcast_arrays", "meshgrid"}
# Functions that take arrays with no elements among others themselves, reading only the
# others: no gather.
_MIXED = {"concat", "concatenate"}
# Not wrapped: no arrays in or out, or nothing NumPy does for them.
_SKIP = {"asnumpy", "to_dask", "rechunk", "can_cast", "result_type", "finfo",
         "iinfo", "isdtype", "__array_namespace_info__"}


class NoElements(DgvmError):
    """Raised by ``creation.allocate`` for a shape with a zero in it; the wrapper of the
    public function that asked answers an empty array of that shape and dtype (a caller
    who asks for the allocation of one gets this error)."""

    def __init__(self, shape, dtype, client=None):
        super().__init__(f"a {tuple(shape)} {np.dtype(dtype)} array has no elements: it is held on "
                         "the caller and has no allocation (dgvm.array._engine.zero_size)")
        self.shape, self.dtype, self.client = tuple(shape), np.dtype(dtype), client


def array(shape, dtype, client):
    """A DArray of ``shape`` (with a zero in it) and ``dtype``, held on the caller (its
    results' arrays go where ``client``'s do)."""
    from dgvm.array._engine import deferred

    return deferred.on_caller(np.empty(tuple(int(s) for s in shape), dtype=dtype), client, "empty")


def _darrays(args, kwargs=None):
    """The DArrays among the arguments, and in lists and tuples among them."""
    for a in (*args, *(kwargs or {}).values()):
        for b in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(b, DArray):
                yield b


def _empty_among(args, kwargs) -> bool:
    return any(a.size == 0 for a in _darrays(args, kwargs))


def _to_numpy(a, real: bool):
    """NumPy's view of an argument: an empty array, a stand-in holding no memory for an
    array with elements, or (``real``) its values."""
    if isinstance(a, DArray):
        if a.size == 0:
            return np.empty(a.shape, dtype=a.dtype)
        return a.to_numpy() if real else np.broadcast_to(np.zeros((), dtype=a.dtype), a.shape)
    if isinstance(a, (list, tuple)) and any(isinstance(b, DArray) for b in a):
        return type(a)(_to_numpy(b, real) for b in a)
    return a




def _has_elements(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_elements(v) for v in value)
    return np.size(value) > 0 if isinstance(value, (np.ndarray, np.generic)) else False


def _from_numpy(value, client):
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and (value.ndim == 0 or value.size == 0)):
        from dgvm.array._engine import deferred

        # Held on the caller: a value as reductions answer it, or an array with no elements.
        return deferred.on_caller(np.asarray(value), client, "value")
    if isinstance(value, np.ndarray):
        from dgvm.array.creation import from_numpy

        return from_numpy(value, client=client)
    if isinstance(value, tuple):  # a namedtuple (unique_all) keeps its type
        items = [_from_numpy(v, client) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_from_numpy(v, client) for v in value]
    return value


def on_host(name: str, args, kwargs, numpy=np):
    """``name`` computed by NumPy (``numpy``: the module that has it) on the caller,
    DArrays in and out."""
    client = next(_darrays(args, kwargs)).client  # an array with no elements is among them
    fn = _HOST.get(name) or getattr(numpy, name)
    kwargs = {k: v for k, v in kwargs.items() if k not in _NOT_NUMPYS}

    def run(real: bool):
        with np.errstate(all="ignore"):
            return fn(*(_to_numpy(a, real) for a in args),
                      **{k: _to_numpy(v, real) for k, v in kwargs.items()})

    value = run(real=False)
    n = sum(a.size for a in _darrays(args, kwargs))
    if n and _has_elements(value):  # the result may depend on their values
        if n > GATHER_LIMIT:
            raise DgvmError(
                f"dgvm.array.{name}: an array with no elements beside arrays of {n} elements "
                f"in all, whose result has elements: that would gather them to the caller "
                f"(at most {GATHER_LIMIT} elements are)"
            )
        value = run(real=True)
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        value = value.copy()  # a stand-in's view, read-only
    out = _from_numpy(value, client)
    return list(out) if name in _LISTS and isinstance(out, tuple) else out


def aware(fn, name: str | None = None, numpy=np):
    """``fn``, answering for arrays with no elements as the module docstring says."""
    name = name or fn.__name__
    if getattr(fn, "_empty_aware", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if name not in _MIXED and _empty_among(args, kwargs):
            return on_host(name, args, kwargs, numpy)
        try:
            return fn(*args, **kwargs)
        except NoElements as e:
            return array(e.shape, e.dtype, e.client)

    wrapper._empty_aware = True
    return wrapper


def install(namespace: dict, skip=(), numpy=np, defined_in: str | None = None) -> None:
    """Wrap the public functions of a namespace (``dgvm.array``, ``dgvm.array.linalg``)
    there and in the modules that define them: DArray's methods and operators import
    them from those modules at call time, and so meet the wrapped ones too. ``skip``:
    names that need no wrapper (elementwise functions: ``elementwise.apply`` answers);
    ``defined_in``: only functions defined in that module (not the helpers it imports)."""
    done: dict = {}  # one wrapper per function: aliases (concatenate = concat) stay aliases
    for name, fn in list(namespace.items()):
        if name.startswith("_") or name in _SKIP or name in skip or not inspect.isfunction(fn):
            continue
        module = sys.modules.get(getattr(fn, "__module__", ""))
        if module is None or not module.__name__.startswith("dgvm.array"):
            continue
        if defined_in is not None and module.__name__ != defined_in:
            continue
        wrapped = done.setdefault(id(fn), aware(fn, name, numpy))
        namespace[name] = wrapped
        for attr in {name, fn.__name__}:
            if getattr(module, attr, None) is fn:
                setattr(module, attr, wrapped)
