"""Views: arrays that share the memory of another, as NumPy's views do.

``x[1:-1, ::2]``, ``x[3]``, ``x[None]``, ``x.T``, ``flip``, ``squeeze`` ... make no copy:
the result is a *view* of ``x``'s memory. A write through the view (``v[...] = w``,
``v += 1``, ``out=v``, ``dgvm.launch(..., out=v)``) writes ``x``'s chunks
(``view_writes``), and every later read of ``x`` or of any view of it sees the write;
a view of a view is one view of the first array.

How a view reads:

- a *strided* view (``Alias.view``, a ``views.View``: each axis walks an axis of the
  base with a start and a step) is, to the engine, a one-leaf deferred tree over its base.
  Elementwise operations and reductions read it in place, at the time they run, so they
  see the base's values then (``x[1:] - x[:-1]`` is one pass over x's chunks);
- an operation that needs stored chunks (a sort, a matmul, a launch argument) reads
  ``stored()``: a copy of the view's elements, made on the workers and kept until the
  base is next written (``ArrayCore._writes`` counts the writes begun on it).

A deferred result *made from* a view is a reader of the base like any other: a write to
the base computes it first, so it keeps the values it was made from (NumPy's results are
new arrays). A view itself is never a reader: it follows the base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from dgvm.array._engine.deferred import Deferred
from dgvm.array._engine.views import View


@dataclass(frozen=True)
class Alias:
    """A view's link to the array whose memory it shares.

    ``base`` owns the memory (never a view itself: views of views compose). A strided
    view has ``view``: how its elements sit in ``base``. A *derived* view (a reshape, the
    real part, a diagonal) has ``source`` (the array it shows, itself perhaps a view)
    and ``derive(source) -> a new array of its values``; a write to it gives the new
    values of the whole view to ``write_back(source, values)``. ``readonly``: writes raise
    NumPy's ``ValueError`` (``broadcast_to``, ``diagonal``)."""

    base: object
    view: View | None = None
    readonly: bool = False
    source: object = None
    derive: Callable | None = None
    write_back: Callable | None = None
    layout: np.ndarray | None = None  # a derived view's stand-in (``stand_in``)

    @property
    def root(self):
        """The array whose writes make copies of this view's values stale."""
        return self.base

    def copy_of(self, x):
        """A new array (of ``x``'s class) that holds the view's values as they are when it
        is computed: deferred, a reader of the base, computed before its next write."""
        if self.view is None:
            return self.derive(self.source)
        tree = Deferred(("in", 0), [self.base], "view-copy", [self.view])
        return type(x).of_deferred(x.shape, x.dtype, x.chunks, tree)


def view_of(x, v: View, name: str, readonly: bool = False):
    """A view (of ``x``'s class) of ``x``'s memory through the View ``v`` of ``x``: a
    view of a view is one view of the first array; a deferred ``x`` is computed first."""
    x.check_usable()  # a view of a freed array fails here, not at first use
    if 0 in v.shape:  # nothing to read: held on the caller (zero_size)
        return type(x).empty_on_caller(v.shape, x.dtype, x.client)
    a = x.alias
    if a is not None and a.view is None:  # a view of a derived view: derived from it
        return derived(x, lambda s: view_of(s.stored(), v, name).stored(), _write_into(v, name),
                       a.readonly or readonly, _strided(a.layout, v))
    if a is not None:
        alias = Alias(a.base, a.view.then(v), a.readonly or readonly)
    else:
        x.materialize()
        alias = Alias(x, v, readonly)
    return type(x).aliasing(alias, v.shape, x.dtype, v.chunks, name)


def whole(x, name: str = "view"):
    """A view of all of ``x`` (``x[...]``): read as a copy where an operation needs one."""
    return view_of(x, View.of_axes(x, tuple(range(x.ndim))), name)


def derived(x, derive, write_back=None, readonly: bool = False, layout=None):
    """A view of ``x`` that is no strided view of its base (``x.reshape(...)`` where NumPy
    gives a view, ``x.real``, ``diagonal``, ``broadcast_to``): ``derive(source)`` makes a
    new array of its values, run now (the first copy, kept until the base is next
    written) and again whenever it is read after a write; ``write_back(source, values)``
    takes the whole view's new values (None: read-only). ``layout``: its ``stand_in``."""
    x.check_usable()
    first = derive(x)
    if first.size == 0 or first.alias is not None:
        return first
    base = x if x.alias is None else x.alias.base
    out = type(x).aliasing(
        Alias(base, None, readonly or write_back is None, source=x, derive=derive, write_back=write_back,
              layout=layout),
        first.shape, first.dtype, first.chunks, "view")
    out.keep_copy(first)
    return out


def _write_into(v: View, name: str):
    """``write_back`` of a strided view ``v`` of a derived view ``s``: ``s``'s values with
    ``v``'s elements replaced, written back to ``s`` whole."""
    def write_back(s, values):
        whole_values = s.alias.copy_of(s)
        view_of(whole_values, v, name)[...] = values
        s[...] = whole_values
    return write_back


def stand_in(x) -> np.ndarray:
    """A NumPy array with ``x``'s shape, dtype and element layout in its base's memory
    (strides over a one-element buffer, never read): NumPy says on it whether a reshape
    or ``ravel`` is a view (``np.reshape(..., copy=False)``)."""
    a = x.alias
    if a is not None and a.view is None:
        return a.layout
    base = x if a is None else a.base
    item = base.dtype.itemsize
    strides = [item] * base.ndim
    for k in range(base.ndim - 2, -1, -1):
        strides[k] = strides[k + 1] * base.shape[k + 1]
    whole = np.lib.stride_tricks.as_strided(np.zeros(1, base.dtype), base.shape, strides)
    return whole if a is None else _strided(whole, a.view)


def _strided(layout, v: View):
    if layout is None:
        return None
    strides = [0 if ax is None else v.step[ax] * layout.strides[ax] for ax in v.axes]
    return np.lib.stride_tricks.as_strided(layout, v.shape, strides)
