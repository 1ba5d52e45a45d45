"""Run kernels written against ``numba.cuda`` on the CPU, compiled by Numba.

A kernel is a plain Python function that indexes threads the CUDA way::

    def axpy(a, x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    compile_cpu(axpy)[(blocks,), (256,)](2.0, x, y, out)

``compile_cpu`` reads the kernel's source, replaces ``cuda.grid``, ``cuda.gridsize`` and
``cuda.threadIdx/blockIdx/blockDim/gridDim.x/y/z`` with plain variables, and generates two
functions: a *thread function*, the kernel's body taking those variables as arguments, and
a *launch function* that loops over every thread of the launch grid (``prange`` over the
x dimension, ``range`` over y and z) and calls it. The thread function is inlined by Numba
(``inline="always"``), so a ``return`` in the kernel ends one thread, as on the GPU, and
costs no call. Anything else from ``numba.cuda`` (shared or local arrays, barriers,
atomics, warp functions, device functions) raises ``Unsupported`` up front: threads run
independently here, so nothing that makes them cooperate can be honoured.

Threads run in no particular order, as on the GPU. Like CUDA, and unlike Python, integer
division by zero does not raise (Numba's ``error_model="numpy"``).

Every index is bounds-checked (Numba's ``boundscheck=True``): a kernel that reads or
writes past the arrays it was given (each a chunk, or a chunk with its halo, exactly)
raises ``IndexError`` instead of touching the memory beside them, which on a worker is
another allocation's chunk in the same arena. A negative index counts from the end, as
in Python (and in Numba's CUDA kernels). The launch raises, and the output chunks it was
writing may be partly written: only kernels that may raise otherwise (``may_raise``) run
all or nothing in ``dgvm.launch``, as a copy of the output in every launch would cost
more than the kernel.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import operator
import sys
import textwrap
import threading
import types
import weakref
from typing import Callable

import numba

from dgvm.protocol.errors import DgvmError

__all__ = ["CpuKernel", "Unsupported", "compile_cpu"]

_AXES = "xyz"
_PREFIX = "_dgvm_"
# The intrinsics the thread function may take, in the order it takes them. Per axis:
# gid = global thread index (cuda.grid), gsize = threads in the grid (cuda.gridsize),
# tid/bid = threadIdx/blockIdx, bdim/gdim = blockDim/gridDim.
_KINDS = ("gid", "gsize", "tid", "bid", "bdim", "gdim")
_REGISTERS = {"threadIdx": "tid", "blockIdx": "bid", "blockDim": "bdim", "gridDim": "gdim"}
_SUPPORTED = (
    "the CPU compiler runs only thread indexing (cuda.grid, cuda.gridsize, "
    "cuda.threadIdx/blockIdx/blockDim/gridDim.x/y/z); on a GPU it runs as written"
)


class Unsupported(DgvmError):
    """A kernel uses something the CPU compiler cannot run compiled.

    The message names the kernel and the feature, e.g. ``uses cuda.syncthreads()``.
    """


def _var(kind: str, axis: int) -> str:
    return f"{_PREFIX}{kind}_{_AXES[axis]}"


def _from_numba_cuda(module_name: str) -> bool:
    return module_name == "numba.cuda" or module_name.startswith(("numba.cuda.", "numba_cuda"))


class _Rewriter(ast.NodeTransformer):
    """Replace thread indexing by variables; reject every other use of ``numba.cuda``.

    Names are resolved against the kernel's globals, so ``from numba import cuda``,
    ``import numba`` (``numba.cuda.grid``) and ``from numba.cuda import grid`` all work.
    """

    def __init__(self, kernel: str, namespace: dict):
        self.kernel = kernel
        self.namespace = namespace
        self.used: set[str] = set()  # intrinsic variables the body reads

    def unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"kernel {self.kernel!r} uses {what}; {_SUPPORTED}")

    def cuda_path(self, node: ast.expr) -> tuple[str, ...] | None:
        """``('threadIdx', 'x')`` for ``cuda.threadIdx.x``; None if not from numba.cuda."""
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and self.namespace.get(base.id) is numba:
                return () if node.attr == "cuda" else None
            path = self.cuda_path(base)
            return None if path is None else (*path, node.attr)
        if not isinstance(node, ast.Name):
            return None
        if node.id not in self.namespace:
            return () if node.id == "cuda" else None
        value = self.namespace[node.id]
        if isinstance(value, types.ModuleType):
            return () if _from_numba_cuda(value.__name__) else None
        module = sys.modules.get("numba.cuda")
        name = getattr(value, "__name__", None)
        if module is not None and name and getattr(module, name, None) is value:
            return (name,)  # e.g. `from numba.cuda import grid`
        return None

    def visit_Call(self, node: ast.Call) -> ast.AST:
        path = self.cuda_path(node.func)
        if path is None:
            return self.generic_visit(node)
        if path not in (("grid",), ("gridsize",)):
            raise self.unsupported(f"cuda.{'.'.join(path)}()")
        kind = "gid" if path == ("grid",) else "gsize"
        args = node.args
        literal = len(args) == 1 and not node.keywords and isinstance(args[0], ast.Constant)
        ndim = args[0].value if literal else None
        if isinstance(ndim, bool) or ndim not in (1, 2, 3):
            raise self.unsupported(f"cuda.{path[0]}() without a literal 1, 2 or 3")
        names = [self.load(_var(kind, axis)) for axis in range(ndim)]
        return names[0] if ndim == 1 else ast.Tuple(elts=names, ctx=ast.Load())

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        path = self.cuda_path(node)
        if path is None:
            return self.generic_visit(node)
        if len(path) == 2 and path[0] in _REGISTERS and path[1] in _AXES:
            return self.load(_var(_REGISTERS[path[0]], _AXES.index(path[1])))
        raise self.unsupported(f"cuda.{'.'.join(path)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id.startswith(_PREFIX):
            raise Unsupported(f"kernel {self.kernel!r} uses the reserved name {node.id!r}")
        if self.cuda_path(node) is not None:
            raise self.unsupported(f"{node.id} as a value")
        value = self.namespace.get(node.id)
        if _from_numba_cuda(type(value).__module__):
            raise self.unsupported(f"the CUDA device function {node.id}()")
        return node

    def load(self, name: str) -> ast.Name:
        self.used.add(name)
        return ast.Name(id=name, ctx=ast.Load())


def source_of(pyfunc: Callable) -> str | None:
    """The source of ``pyfunc`` as its file says now (None where there is none)."""
    try:
        return textwrap.dedent(inspect.getsource(pyfunc))
    except (OSError, TypeError):
        return None


def _parse(pyfunc: Callable, source: str | None = None) -> ast.FunctionDef:
    source = source if source is not None else source_of(pyfunc)
    if source is None:
        raise Unsupported(f"the source of kernel {pyfunc!r} is not available")
    node = ast.parse(source).body[0]
    # At the kernel's own lines, so that Numba's errors point into the user's file.
    ast.increment_lineno(node, pyfunc.__code__.co_firstlineno - 1)
    if not isinstance(node, ast.FunctionDef):
        raise Unsupported(f"kernel {pyfunc!r} is not defined by a def statement")
    params = node.args
    if params.vararg or params.kwarg or params.kwonlyargs or params.posonlyargs:
        raise Unsupported(f"kernel {node.name!r} takes *args, **kwargs or keyword-only args")
    return node


def _namespace(pyfunc: Callable, tree: ast.FunctionDef) -> dict:
    """The globals and closure variables the kernel names; the generated code runs in it.

    Only the names it uses, so that the namespace does not keep the module alive.
    """
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    namespace = {n: pyfunc.__globals__[n] for n in names if n in pyfunc.__globals__}
    cells = zip(pyfunc.__code__.co_freevars, pyfunc.__closure__ or ())
    namespace.update({name: cell.cell_contents for name, cell in cells if name in names})
    namespace["__name__"] = pyfunc.__module__
    return namespace


def _thread_function(tree: ast.FunctionDef, name: str, namespace: dict) -> list[str]:
    """Rewrite ``tree`` into the kernel as a function of the intrinsics it reads, then of
    its own parameters; return those intrinsics, in a fixed order."""
    rewriter = _Rewriter(tree.name, namespace)
    body = [rewriter.visit(statement) for statement in tree.body]
    intrinsics = [
        _var(kind, axis) for kind in _KINDS for axis in range(3)
        if _var(kind, axis) in rewriter.used
    ]
    params = [param.arg for param in tree.args.args]
    tree.name, tree.body, tree.decorator_list, tree.returns = name, body, [], None
    tree.args.args = [ast.arg(arg=arg) for arg in intrinsics + params]  # annotations dropped
    ast.fix_missing_locations(tree)
    return intrinsics


# Calls into these cannot raise in Numba's compiled code with error_model="numpy" (a bad
# argument gives nan, as on the GPU); a call to anything else may.
_NON_RAISING_MODULES = ("math", "cmath")
_NON_RAISING_BUILTINS = ("abs", "min", "max", "round", "int", "float", "bool", "complex", "range", "len")


def _may_raise(tree: ast.FunctionDef, namespace: dict) -> bool:
    """Whether the compiled kernel could raise after writing some of its output for
    another reason than an index out of bounds: a ``raise`` or ``assert``, a call into
    user code or NumPy. (An index out of bounds is a bug in the kernel, as an illegal
    address is on a GPU, where it costs the whole device's chunks: checked, it costs no
    copy of the output in every launch, and the launch's output chunks may be partly
    written.)"""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Raise, ast.Assert)):
            return True
        if not isinstance(node, ast.Call):
            continue
        root = node.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return True
        value = namespace.get(root.id, getattr(builtins, root.id, None))
        if isinstance(value, types.ModuleType):
            name = value.__name__
            if name in _NON_RAISING_MODULES or _from_numba_cuda(name) or value is numba:
                continue  # numba.cuda: only thread indexing gets this far
        elif root.id in _NON_RAISING_BUILTINS and value is getattr(builtins, root.id):
            continue
        return True
    return False


class CpuKernel:
    """A ``numba.cuda``-style kernel compiled for the CPU; made by ``compile_cpu``.

    Launch it as ``kernel(griddim, blockdim, *args)`` or, as with ``cuda.jit``,
    ``kernel[griddim, blockdim](*args)``. One launch function is compiled per launch
    dimensionality (1, 2 or 3); Numba compiles each of those once per argument types.
    """

    def __init__(self, pyfunc: Callable, source: str | None = None):
        tree = _parse(pyfunc, source)
        self.__name__ = tree.name
        self.__doc__ = pyfunc.__doc__
        self._params = [param.arg for param in tree.args.args]
        self._namespace = _namespace(pyfunc, tree)
        # Whether a launch can fail with part of its output written for another reason
        # than an index out of bounds (dgvm.launch keeps a copy of the chunk only then).
        self.may_raise = _may_raise(tree, self._namespace)
        self._thread_name = f"{_PREFIX}thread_{tree.name}"
        self._intrinsics = _thread_function(tree, self._thread_name, self._namespace)
        self._thread_source = ast.unparse(tree)
        module = ast.Module(body=[tree], type_ignores=[])
        exec(compile(module, pyfunc.__code__.co_filename, "exec"), self._namespace)
        # Inlined into the launcher: no call per thread, and `return` ends only that thread.
        thread = self._namespace[self._thread_name]
        self._namespace[self._thread_name] = numba.njit(
            inline="always", error_model="numpy", boundscheck=True
        )(thread)
        self._namespace[f"{_PREFIX}prange"] = numba.prange
        self._launchers: dict[int, numba.core.registry.CPUDispatcher] = {}
        self._lock = threading.Lock()

    def __call__(self, griddim, blockdim, *args) -> None:
        """Run every thread of the launch ``griddim`` blocks of ``blockdim`` threads."""
        griddim, blockdim = _launch_config(griddim, blockdim, self.__name__)
        if len(args) != len(self._params):
            raise TypeError(
                f"kernel {self.__name__!r} takes {len(self._params)} arguments "
                f"({', '.join(self._params)}), got {len(args)}"
            )
        launcher = self.dispatcher(len(griddim))
        with _LAUNCH_LOCK:
            try:
                launcher(griddim, blockdim, *args)
            except (IndexError, SystemError) as e:
                # An exception in a parallel loop comes out of Numba as a SystemError,
                # "returned a result with an exception set", caused by the real one.
                cause = e.__cause__ if isinstance(e, SystemError) else e
                if isinstance(cause, IndexError):  # a bounds check
                    raise IndexError(
                        f"kernel {self.__name__!r} indexed past an array it was given ({cause}); "
                        "each array argument is one chunk (with its halo, if any)"
                    ) from None
                if isinstance(cause, Exception) and cause is not e:
                    raise cause.with_traceback(None) from None
                raise

    def __getitem__(self, config: tuple) -> Callable[..., None]:
        griddim, blockdim = config
        return lambda *args: self(griddim, blockdim, *args)

    def dispatcher(self, ndim: int) -> numba.core.registry.CPUDispatcher:
        """The Numba dispatcher that launches ``ndim``-dimensional grids of this kernel.

        It takes ``(griddim, blockdim, *args)`` with both tuples of length ``ndim``.
        """
        with self._lock:
            if ndim not in self._launchers:
                filename = f"<dgvm cpu launcher {self.__name__} {ndim}d>"
                _exec_generated(self.source(ndim), filename, self._namespace)
                self._launchers[ndim] = numba.njit(parallel=True, error_model="numpy", boundscheck=True)(
                    self._namespace[self._launcher_name(ndim)]
                )
            return self._launchers[ndim]

    def source(self, ndim: int | None = None) -> str:
        """The generated Python source: the thread function, or the ``ndim``-D launcher."""
        if ndim is None:
            return self._thread_source
        if ndim not in (1, 2, 3):
            raise ValueError(f"a launch has 1, 2 or 3 dimensions, not {ndim}")
        return _launcher_source(
            self._launcher_name(ndim), ndim, self._thread_name, self._intrinsics, self._params
        )

    def _launcher_name(self, ndim: int) -> str:
        return f"{_PREFIX}launch_{self.__name__}_{ndim}d"

    def __repr__(self) -> str:
        return f"<CpuKernel {self.__name__}({', '.join(self._params)})>"


def _exec_generated(source: str, filename: str, namespace: dict) -> None:
    # Registered with linecache so that tracebacks and Numba's errors show the lines.
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    exec(compile(source, filename, "exec"), namespace)


def _launcher_source(
    name: str, ndim: int, thread: str, intrinsics: list[str], params: list[str]
) -> str:
    """Loops over every thread of an ``ndim``-D launch, calling the thread function.

    ``prange`` over x (the first launch dimension) spreads whole rows of threads over the
    cores; y and z run in order inside. Axes past ``ndim`` have one block of one thread.
    Only the intrinsics the body reads are computed.
    """
    grid, block = f"{_PREFIX}grid", f"{_PREFIX}block"
    used = set(intrinsics)
    setup: list[str] = []  # before the loops: launch-wide values
    loops: list[list[str]] = []  # per launch axis: the loop header and per-thread values
    for axis in range(3):
        var = {kind: _var(kind, axis) for kind in _KINDS}
        if axis >= ndim:
            setup += [f"{var[k]} = 0" for k in ("gid", "tid", "bid") if var[k] in used]
            setup += [f"{var[k]} = 1" for k in ("gsize", "bdim", "gdim") if var[k] in used]
            continue
        block_index = var["bid"] in used or var["tid"] in used
        if var["bdim"] in used or block_index:
            setup.append(f"{var['bdim']} = {block}[{axis}]")
        if var["gdim"] in used:
            setup.append(f"{var['gdim']} = {grid}[{axis}]")
        setup.append(f"{var['gsize']} = {grid}[{axis}] * {block}[{axis}]")
        loop = f"{_PREFIX}prange" if axis == 0 else "range"
        body = [f"for {var['gid']} in {loop}({var['gsize']}):"]
        if block_index:
            body.append(f"    {var['bid']} = {var['gid']} // {var['bdim']}")
        if var["tid"] in used:
            body.append(f"    {var['tid']} = {var['gid']} - {var['bid']} * {var['bdim']}")
        loops.append(body)
    lines = [f"def {name}({grid}, {block}, {', '.join(params)}):"]
    lines += [f"    {line}" for line in setup]
    for depth, body in enumerate(loops, start=1):
        lines += ["    " * depth + line for line in body]
    lines.append("    " * (ndim + 1) + f"{thread}({', '.join(intrinsics + params)})")
    return "\n".join(lines) + "\n"


def _launch_config(griddim, blockdim, kernel: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Both as tuples of the same length, 1 to 3, padded with ones as CUDA does."""
    dims = []
    for what, given in (("griddim", griddim), ("blockdim", blockdim)):
        items = given if isinstance(given, (tuple, list)) else [given]
        try:
            value = tuple(map(operator.index, items))  # NumPy integers too
        except TypeError:
            value = ()
        if not 1 <= len(value) <= 3 or min(value) < 1:
            raise ValueError(
                f"launch of kernel {kernel!r}: {what} must be 1 to 3 positive ints, got {given!r}"
            )
        dims.append(value)
    ndim = max(len(dims[0]), len(dims[1]))
    griddim, blockdim = (d + (1,) * (ndim - len(d)) for d in dims)
    return griddim, blockdim


# One launch at a time: each already uses every core, and Numba's workqueue threading
# layer aborts the process when parallel functions are called from several threads at once.
_LAUNCH_LOCK = threading.Lock()
# Compiled kernels per function (a pure cache, gone with the function): per process.
_KERNELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_KERNELS_LOCK = threading.Lock()


def compile_cpu(pyfunc: Callable, source: str | None = None) -> CpuKernel:
    """Compile a ``numba.cuda``-style kernel (a plain function) to run on the CPU, from
    ``source`` (its def statement, as read where it was defined) or its file as it is now.

    Raises ``Unsupported`` at once if the kernel uses anything from ``numba.cuda`` but
    thread indexing. The result is cached per function; a ``cuda.jit`` dispatcher is
    accepted too (its ``py_func`` is compiled).
    """
    pyfunc = getattr(pyfunc, "py_func", pyfunc)
    with _KERNELS_LOCK:
        kernel = _KERNELS.get(pyfunc)
        if kernel is None:
            kernel = _KERNELS[pyfunc] = CpuKernel(pyfunc, source)
        return kernel
