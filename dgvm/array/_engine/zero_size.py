"""Arrays with no elements: held on the caller, computed with NumPy.

The standard covers shapes with a zero in them (``zeros((0, 3))``, ``x[5:2]``, the
indices of ``nonzero`` where nothing is), but a GVAT allocation holds at least one byte:
there is nothing to place. So an array of size 0 is a host value
(``ArrayCore.empty_on_caller``) of ``numpy.empty(shape, dtype)`` with one empty block
per axis, and never touches a worker.

Every public function of ``dgvm.array`` that takes or makes arrays says, at its
definition, ``@empty_aware``; the elementwise functions need not (``apply`` answers), nor
``rechunk``, ``to_dask`` and ``asnumpy``, which answer for them themselves:

- given an array of size 0 among its arguments, the function runs on the caller with
  NumPy's function of the same name (the standard's names are NumPy 2's; ``numpy=``
  names the module that has it, ``host=`` gives the function where NumPy has none).
  Arrays with elements given alongside enter as stand-ins that hold no memory (a zero
  broadcast to their shape): a result with no elements (``x[empty_index]``,
  ``take(x, empty)``) needs none of their values. A result with elements that depends on
  them (``where(empty_mask, x, y)`` cannot, ``outer(x, empty)`` has none) is computed
  again from their values only when they are small (``GATHER_LIMIT``); otherwise the
  call raises ``DgvmError`` rather than gather them; a call NumPy refuses for the
  stand-ins' zeros (``linalg.solve(x, empty)``: singular as zeros) is asked again with
  the values when they are small. Results are made DArrays again:
  stored in the GVAT when they have elements (``zeros((3, 0)) @ zeros((0, 4))``,
  ``sum(zeros(0))``), host values when not. A function that takes arrays with no
  elements among others itself, reading only the others (``concat``: ``mixed=True``),
  gets no NumPy call;
- a result with no elements although the arguments have some (``arange(0)``, ``x[5:2]``
  computed, ``zeros((0, 3))``) is made held on the caller where it would be allocated
  (``ArrayCore.allocated``); a function that then asks for its allocation meets
  ``allocation.NoElements``, and answers the empty array instead.
"""

from __future__ import annotations

import functools

import numpy as np

from dgvm.array._engine.allocation import NoElements
from dgvm.array._engine.core import ArrayCore
from dgvm.protocol.errors import DgvmError

# dgvm's own keywords (placement, chunks, the client), and the standard's that NumPy's
# functions lack, where they make no difference to an array with no elements.
_NOT_NUMPYS = {"chunks", "placement", "colocate", "client", "device", "descending", "copy"}
GATHER_LIMIT = 1 << 20  # elements of arrays with elements a mixed call may gather


def _arrays(args, kwargs=None):
    """The arrays among the arguments, and in lists and tuples among them."""
    for a in (*args, *(kwargs or {}).values()):
        for b in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(b, ArrayCore):
                yield b


def _empty_among(args, kwargs) -> bool:
    return any(a.size == 0 for a in _arrays(args, kwargs))


def _to_numpy(a, real: bool):
    """NumPy's view of an argument: an empty array, a stand-in holding no memory for an
    array with elements, or (``real``) its values."""
    if isinstance(a, ArrayCore):
        if a.size == 0:
            return np.empty(a.shape, dtype=a.dtype)
        return a.to_numpy() if real else np.broadcast_to(np.zeros((), dtype=a.dtype), a.shape)
    if isinstance(a, (list, tuple)) and any(isinstance(b, ArrayCore) for b in a):
        return type(a)(_to_numpy(b, real) for b in a)
    return a


def _has_elements(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_elements(v) for v in value)
    return np.size(value) > 0 if isinstance(value, (np.ndarray, np.generic)) else False


def _from_numpy(value, like):
    """NumPy's result as arrays of ``like``'s class and cluster."""
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and (value.ndim == 0 or value.size == 0)):
        # Held on the caller: a value as reductions answer it, or an array with no elements.
        return type(like).on_caller(np.asarray(value), like.client, "value")
    if isinstance(value, np.ndarray):
        return type(like).from_host(value, client=like.client)
    if isinstance(value, tuple):  # a namedtuple (unique_all) keeps its type
        items = [_from_numpy(v, like) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_from_numpy(v, like) for v in value]
    return value


def on_host(fn, name: str, args, kwargs, as_list: bool = False):
    """``fn`` (NumPy's ``name``) computed on the caller, arrays in and out."""
    like = next(_arrays(args, kwargs))  # an array with no elements is among them
    kwargs = {k: v for k, v in kwargs.items() if k not in _NOT_NUMPYS}

    def run(real: bool):
        with np.errstate(all="ignore"):
            return fn(*(_to_numpy(a, real) for a in args),
                      **{k: _to_numpy(v, real) for k, v in kwargs.items()})

    n = sum(a.size for a in _arrays(args, kwargs))
    try:
        value = run(real=False)
    except Exception:
        # NumPy may refuse the stand-ins' zeros where it takes the real values
        # (``linalg.solve(x, empty)`` with x singular only as zeros): ask again with the
        # values, when they are small, and answer as NumPy does for them.
        if not n or n > GATHER_LIMIT:
            raise
        value = run(real=True)
    else:
        if n and _has_elements(value):  # the result may depend on their values
            if n > GATHER_LIMIT:
                raise DgvmError(
                    f"dgvm.array.{name}: an array with no elements beside arrays of {n} "
                    f"elements in all, whose result has elements: that would gather them to "
                    f"the caller (at most {GATHER_LIMIT} elements are)"
                )
            value = run(real=True)
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        value = value.copy()  # a stand-in's view, read-only
    out = _from_numpy(value, like)
    return list(out) if as_list and isinstance(out, tuple) else out


def empty_aware(fn=None, *, numpy=np, host=None, mixed: bool = False, as_list: bool = False):
    """Decorator: ``fn`` answers for arrays with no elements, as the module docstring
    says. ``numpy``: the module with NumPy's function of ``fn``'s name (``numpy.linalg``);
    ``host``: the function to run instead, where NumPy's differs; ``mixed``: ``fn`` takes
    empty arrays among others itself; ``as_list``: ``fn`` answers a list where NumPy
    answers a tuple."""
    if fn is None:
        return functools.partial(empty_aware, numpy=numpy, host=host, mixed=mixed, as_list=as_list)
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not mixed and _empty_among(args, kwargs):
            return on_host(host or getattr(numpy, name), name, args, kwargs, as_list)
        try:
            return fn(*args, **kwargs)
        except NoElements as e:
            if e.cls is None:
                raise
            return e.cls.empty_on_caller(e.shape, e.dtype, e.client)

    return wrapper
