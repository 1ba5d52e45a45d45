"""One pass over memory for an elementwise expression tree (see ``deferred``, ``trees``).

``run_into(expr, leaves, xp, target, stripped)`` writes the tree's value into the output chunk:

- ``cuda``: the tree becomes one CUDA kernel, compiled once per tree shape and dtypes
  and cached in the worker (the last ``MAX_KERNELS`` trees); Python scalars are kernel
  arguments, so ``x * 2`` and ``x * 3`` share a kernel. It writes into the chunk itself.
  A float tree over contiguous leaves runs as a generated kernel that keeps four loads
  in flight per thread (``wide_kernel``); any other tree as ``cupy.fuse``'s kernel,
  built from the same CuPy ufuncs the unfused path calls (the same per-dtype code).
- ``cpu``: the tree runs tile by tile (``TILE`` elements) with NumPy, so every
  intermediate stays in the CPU's cache and memory is read and written once.

Both answer False when they cannot (leaves that are not plain views of the chunk's shape
on cpu; a function ``cupy.fuse`` does not trace on cuda); the caller then evaluates the
tree whole, as before.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from dgvm.array._engine import wide_kernel
from dgvm.array._engine.trees import call, evaluate
from dgvm.backends import working_memory

logger = logging.getLogger("dgvm.array._engine.fused")

# Elements per cpu tile. Dask's worker processes run with MALLOC_TRIM_THRESHOLD_=65536, so
# glibc gives freed memory back (and faults it in again) for every temporary past 64 KiB:
# 32 KiB float64 temporaries stay clear of that and in the L1/L2 caches (measured in a
# worker: 4096 elements 2.9 ms per 750x750 chunk of a 6-operation chain, 16384 elements
# 11 ms, the whole chunk at once 7-8 ms).
TILE = 1 << 12


def run_into(expr, leaves: list, xp, target, stripped) -> bool:
    """Write ``expr`` over ``leaves`` into ``target`` in one pass; False if not possible.
    ``stripped``: ``strip(expr)``, made once by the caller that runs ``expr`` per chunk."""
    if xp is np:
        return _tiles(expr, leaves, target)
    if getattr(xp, "__name__", "") == "cupy":
        return _cupy(stripped, leaves, target)
    return False


def strip(expr) -> tuple:
    """(the tree with its Python scalars as kernel arguments, the scalars): what the
    kernels are compiled for, so that ``x * 2`` and ``x * 3`` share one."""
    scalars: list = []
    return _strip(expr, scalars), scalars


# -- cpu ---------------------------------------------------------------------------------
def _tiles(expr, leaves, target) -> bool:
    if not target.flags.c_contiguous or target.size <= TILE:
        return False
    flat = []
    for a in leaves:
        if a.size == 1:
            flat.append(a.reshape(()))
        elif a.shape == target.shape and a.flags.c_contiguous:
            flat.append(a.reshape(-1))
        else:
            return False  # broadcast or strided leaves: evaluated whole
    out = target.reshape(-1)
    with np.errstate(all="ignore"):
        for start in range(0, out.size, TILE):
            stop = min(out.size, start + TILE)
            out[start:stop] = evaluate(expr, [a if a.ndim == 0 else a[start:stop] for a in flat], np)
    return True


# -- cuda --------------------------------------------------------------------------------
MAX_KERNELS = 256
# Compiled kernels of the worker process (and how each tree last ran, for ``ways_used``),
# keyed by what they compute (the tree without its scalars, leaf dtypes and ndims,
# target): a pure cache of compiled code, shared by every client's tasks, so per process
# and not per client session.
_kernels: dict = {}  # (tree without scalars, leaf dtypes and ndims, target) -> usable ways
_why: dict = {}  # tree key -> why the last way dropped failed
_last: dict = {}  # tree key -> the way it last ran
_lock = threading.Lock()


def _ways(key, build) -> list:
    """The cached ways (kernels) of a tree, built on first use; a long-lived worker
    forgets the oldest tree past ``MAX_KERNELS``."""
    with _lock:
        ways = _kernels.get(key)
        if ways is None:
            if len(_kernels) >= MAX_KERNELS:
                oldest = next(iter(_kernels))
                _kernels.pop(oldest)
                _why.pop(oldest, None)
                _last.pop(oldest, None)
            ways = _kernels[key] = build()
        return ways


def _strip(expr, scalars: list):
    """The tree with each Python scalar replaced by ``("arg", j)`` (kernel argument j)."""
    kind = expr[0]
    if kind == "const":
        if expr[1] is None:
            return expr
        scalars.append(expr[1])
        return ("arg", len(scalars) - 1, type(expr[1]).__name__)
    if kind == "in":
        return expr
    _, name, args, dtype = expr
    return ("call", name, tuple(_strip(a, scalars) for a in args), np.dtype(dtype).str)


def _trace(expr, leaves, scalars, cupy):
    kind = expr[0]
    if kind == "in":
        return leaves[expr[1]]
    if kind == "arg":
        return scalars[expr[1]]
    if kind == "const":
        return expr[1]
    _, name, args, dtype = expr
    value = call(cupy, name, [_trace(a, leaves, scalars, cupy) for a in args])
    dtype = np.dtype(dtype)
    return value if getattr(value, "dtype", None) == dtype else value.astype(dtype)


def _build(tree, nleaves: int, nscalars: int, into: bool):
    """``cupy.fuse``'s kernel as a way ``run(leaves, scalars, target)``: writing into its
    last argument (``into``), or returning the value (for a CuPy whose fusion does not
    trace ``out[...] = ...``; one copy more). Contiguous leaves of the target's shape run
    as 1-D arrays: a kernel over one axis indexes without a division per element."""
    import cupy  # optional: only cuda workers have it, and only they get here

    def kernel(*params):
        leaves, scalars = params[:nleaves], params[nleaves:nleaves + nscalars]
        value = _trace(tree, leaves, scalars, cupy)
        if not into:
            return value
        params[-1][...] = value

    fused = cupy.fuse(kernel_name="dgvm_fused")(kernel)

    def run(leaves, scalars, target) -> bool:
        flat = _flat(leaves, target.shape) if target.flags.c_contiguous else None
        if flat is not None:
            leaves, target = flat, target.reshape(-1)
        if into:
            fused(*leaves, *scalars, target)
        else:
            target[...] = fused(*leaves, *scalars)
        return True

    return run


def _elementwise_ways(tree, leaves, target, nscalars: int) -> list:
    """The ways a tree may run, best first: (what ``ways_used`` calls it, run)."""
    ways = []
    wide = wide_kernel.build(tree, [a.dtype for a in leaves], target.dtype, nscalars)
    if wide is not None:
        ways.append(("wide", wide))
    ways.append(("in place", _build(tree, len(leaves), nscalars, True)))
    ways.append(("copy", _build(tree, len(leaves), nscalars, False)))
    return ways


def _flat(leaves, shape):
    """1-D views of the leaves when each is a C-contiguous array of ``shape`` (a kernel
    over one axis indexes without a division per element), else None."""
    if len(shape) < 2 or not all(a.shape == tuple(shape) and a.flags.c_contiguous for a in leaves):
        return None
    return [a.reshape(-1) for a in leaves]


def _cupy(stripped, leaves, target) -> bool:
    tree, scalars = stripped
    key = (tree, tuple((a.dtype.str, a.ndim) for a in leaves), target.dtype.str, target.ndim)
    # Best first. A way that does not apply to these leaves (the wide kernel, to a strided
    # one) answers False and stays; one that fails (a tree cupy.fuse cannot trace) goes.
    ways = _ways(key, lambda: _elementwise_ways(tree, leaves, target, len(scalars)))
    for way in list(ways):
        kind, run = way
        try:
            if run(leaves, scalars, target):
                if _last.get(key) != kind:  # reporting only: no lock per chunk when unchanged
                    _last[key] = kind
                return True
        except Exception as e:  # noqa: BLE001
            if working_memory.is_out_of_memory(e):
                raise  # the device was full: the kernel is fine (the task reports it)
            logger.info("fused kernel (%s) not usable (%s: %s)", kind, type(e).__name__, e)
            with _lock:
                _why[key] = f"{type(e).__name__}: {e}"
                if way in ways:
                    ways.remove(way)
    return False


# Reductions a fused kernel can end with: the reduction's name -> CuPy's function.
REDUCERS = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin"}


def reduce_tree(stripped, leaves: list, xp, fn: str, axes: tuple, dtype, shape):
    """The partial ``fn(expr, axis=axes, keepdims=True, dtype=dtype)`` of one chunk of
    shape ``shape`` (``stripped``: ``strip(expr)``) in one pass, by rows (the tree's values are never stored), or None where
    that is not possible (cpu, another reduction, a tree ``cupy.fuse`` does not trace)."""
    if getattr(xp, "__name__", "") != "cupy" or fn not in REDUCERS:
        return None
    # Only whole-chunk reductions of contiguous leaves: CuPy's fused reduction over an
    # axis, or over a strided leaf (x.T), was measured far slower than the tree stored
    # to a scratch chunk and reduced (832 ms against 11 ms for (x + x.T).sum() at 40000²).
    if tuple(axes) != tuple(range(len(shape))):
        return None
    leaves = _flat(leaves, shape) if len(shape) > 1 else leaves
    if leaves is None or not all(a.flags.c_contiguous for a in leaves):
        return None
    tree, scalars = stripped
    dtype = None if dtype is None else np.dtype(dtype)
    key = ("reduce", fn, None if dtype is None else dtype.str, tree,
           tuple((a.dtype.str, a.ndim) for a in leaves))
    ways = _ways(key, lambda: [("fused reduction", (
        _build_reduce(tree, len(leaves), len(scalars), fn, dtype, None),
        _build_reduce(tree, len(leaves), len(scalars), fn, dtype, 1)))])
    if not ways:
        return None
    whole, by_rows = ways[0][1]
    try:
        value = _reduce_in_rows(whole, by_rows, leaves, scalars, fn)
    except Exception as e:  # noqa: BLE001  (a tree or reduction cupy.fuse cannot trace)
        if working_memory.is_out_of_memory(e):
            raise  # the device was full: the kernel is fine (the task reports it)
        logger.info("fused reduction not usable (%s: %s)", type(e).__name__, e)
        with _lock:
            _why[key] = f"{type(e).__name__}: {e}"
            ways.clear()
        return None
    return value.reshape((1,) * len(shape))  # keepdims over every axis


# A fused reduction to one value runs as one block of threads (CuPy gives a reduction a
# block per output element): 117 ms for the sum of a 1 GiB product on an H100. So the
# leaves are cut into ROWS rows of at least ROW elements, each row reduced by a block of
# its own, and the rows' values (and those of the few elements left over) reduced then.
ROWS, ROW = 4096, 2048


def _reduce_in_rows(whole, by_rows, leaves, scalars, fn):
    """``fn`` of the tree over 1-D ``leaves`` (0-d ones broadcast): by rows where they
    are long enough, else in one kernel."""
    import cupy  # optional: only cuda workers get here

    n = max(a.size for a in leaves)
    rows = min(ROWS, n // ROW)
    if rows < 2:
        return whole(*leaves, *scalars)
    k = n // rows
    # (a leaf of one element broadcasts, whole)
    head = [a[:rows * k].reshape(rows, k) if a.size == n else a for a in leaves]
    parts = [by_rows(*head, *scalars)]
    if rows * k < n:
        parts.append(whole(*[a[rows * k:] if a.size == n else a for a in leaves], *scalars).reshape(1))
    return getattr(cupy, REDUCERS[fn])(cupy.concatenate(parts) if len(parts) > 1 else parts[0])


def _build_reduce(tree, nleaves: int, nscalars: int, fn: str, dtype, axis):
    import cupy  # optional: only cuda workers have it, and only they get here

    reducer = getattr(cupy, REDUCERS[fn])

    def kernel(*params):
        value = _trace(tree, params[:nleaves], params[nleaves:], cupy)
        if dtype is not None and value.dtype != dtype:
            value = value.astype(dtype)
        return reducer(value) if axis is None else reducer(value, axis=axis)

    return cupy.fuse(kernel_name=f"dgvm_fused_{fn}{'' if axis is None else '_rows'}")(kernel)


def ways_used() -> dict:
    """How each tree compiled on this worker ran last: tree key -> "wide", "in place",
    "copy", "fused reduction" or "unfused (why)" (benchmarks and tests print it)."""
    with _lock:
        return {key: ("unfused" + f" ({_why.get(key, '?')})" if not ways else
                      _last.get(key, ways[0][0])) for key, ways in _kernels.items()}
