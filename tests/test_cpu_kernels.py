"""Kernels written against ``numba.cuda``, run on the CPU by ``dgvm.kernels.cpu``.

Every result is compared against NumPy. The ``launch`` fixture runs each test body on the
CPU compiler and, with ``-m gpu`` where a GPU is visible, through ``numba.cuda.jit``, so
the two agree on what a kernel means.
"""

from __future__ import annotations

import math
import re

import numba
import numpy as np
import pytest
from numba import cuda
from numba.cuda import grid

from dgvm.kernels.cpu import CpuKernel, Unsupported, compile_cpu

# --- kernels -------------------------------------------------------------------------


def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def smooth(x, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j] * 0.5


def scale3(x, out):
    i, j, k = cuda.grid(3)
    if i < out.shape[0] and j < out.shape[1] and k < out.shape[2]:
        out[i, j, k] = 2 * x[i, j, k] + i - j * k


def grid_stride_square(x, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, x.size, stride):
        out[i] = x[i] * x[i]


def block_axpy(a, x, out):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < out.size:
        out[i] = a * x[i]


def record_indices(out):
    """Each thread writes its 12 index registers at its global position."""
    i, j, k = cuda.grid(3)
    if i >= out.shape[0] or j >= out.shape[1] or k >= out.shape[2]:
        return
    values = (
        cuda.threadIdx.x, cuda.threadIdx.y, cuda.threadIdx.z,
        cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z,
        cuda.blockDim.x, cuda.blockDim.y, cuda.blockDim.z,
        cuda.gridDim.x, cuda.gridDim.y, cuda.gridDim.z,
    )
    for n in range(12):
        out[i, j, k, n] = values[n]


def clip_negative(x, out):
    i = cuda.grid(1)
    if i >= out.size:
        return
    if x[i] < 0:
        out[i] = 0
        return
    for _ in range(3):
        if x[i] > 10:
            return  # returns from the thread, not just the loop
        out[i] = x[i]
        break


def softplus(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = math.log(1.0 + math.exp(x[i])) + math.sqrt(abs(x[i]))


@cuda.jit
def axpy_other_spellings(a, x, out):
    i = numba.cuda.grid(1)
    j = grid(1)
    if i < out.size:
        out[i] += a * x[j]


# --- kernels the CPU compiler refuses ------------------------------------------------


def uses_shared(x):
    tile = cuda.shared.array(32, numba.float32)
    tile[cuda.threadIdx.x] = x[cuda.grid(1)]


def uses_syncthreads(x):
    x[cuda.grid(1)] = 1
    cuda.syncthreads()


def uses_atomic(counter):
    cuda.atomic.add(counter, 0, 1)


def uses_local(x):
    scratch = cuda.local.array(4, numba.float64)
    scratch[0] = x[0]


@cuda.jit(device=True)
def _device_helper(v):
    return v + 1


def uses_device_function(x):
    i = cuda.grid(1)
    x[i] = _device_helper(x[i])


def uses_dynamic_grid(x, n):
    x[cuda.grid(n)] = 1


# --- one test body, two compilers ----------------------------------------------------


def _launch_cuda(pyfunc, griddim, blockdim, *args):
    from dgvm.backends.numba_compat import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    cuda.jit(pyfunc)[griddim, blockdim](*args)  # copies NumPy arguments back after the run


def _launch_cpu(pyfunc, griddim, blockdim, *args):
    compile_cpu(pyfunc)(griddim, blockdim, *args)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def launch(request):
    return _launch_cuda if request.param == "cuda" else _launch_cpu


def _blocks(n, block):
    return -(-n // block)


def test_axpy_size_not_a_multiple_of_the_block(launch):
    n, block = 1000, 128
    x, y = np.arange(n, dtype=np.float64), np.linspace(0, 1, n)
    out = np.full(n, np.nan)
    launch(axpy, (_blocks(n, block),), (block,), 2.5, x, y, out)
    np.testing.assert_allclose(out, 2.5 * x + y)


def test_2d_grid(launch):
    x = np.random.default_rng(0).random((37, 23))
    out = np.full_like(x, np.nan)
    launch(smooth, (_blocks(37, 8), _blocks(23, 8)), (8, 8), x, out)
    np.testing.assert_allclose(out, x * 0.5)


def test_3d_grid(launch):
    x = np.random.default_rng(1).random((9, 6, 5))
    out = np.full_like(x, np.nan)
    launch(scale3, (3, 2, 2), (4, 4, 4), x, out)
    i, j, k = np.indices(x.shape)
    np.testing.assert_allclose(out, 2 * x + i - j * k)


def test_grid_stride_loop_covers_more_elements_than_threads(launch):
    x = np.arange(10_000, dtype=np.float64)
    out = np.full_like(x, np.nan)
    launch(grid_stride_square, (3,), (64,), x, out)  # 192 threads
    np.testing.assert_array_equal(out, x * x)


def test_block_and_thread_index_registers(launch):
    x = np.arange(700, dtype=np.float64)
    out = np.full_like(x, np.nan)
    launch(block_axpy, (6,), (128,), 3.0, x, out)
    np.testing.assert_array_equal(out, 3.0 * x)


@pytest.mark.parametrize(
    ("griddim", "blockdim"),
    [((2, 3, 2), (4, 2, 3)), ((3,), (5,))],  # 3-D, and 1-D where y and z are implicit
)
def test_every_index_register_matches_cuda(launch, griddim, blockdim):
    griddim3 = griddim + (1,) * (3 - len(griddim))
    blockdim3 = blockdim + (1,) * (3 - len(blockdim))
    shape = tuple(g * b for g, b in zip(griddim3, blockdim3))
    out = np.full(shape + (12,), -1, dtype=np.int64)
    launch(record_indices, griddim, blockdim, out)
    gid = np.indices(shape)
    block = np.array(blockdim3).reshape(3, 1, 1, 1)
    expected = np.concatenate([
        gid % block,
        gid // block,
        np.broadcast_to(block, gid.shape),
        np.broadcast_to(np.array(griddim3).reshape(3, 1, 1, 1), gid.shape),
    ])
    np.testing.assert_array_equal(np.moveaxis(out, -1, 0), expected)


def test_early_return_ends_the_thread(launch):
    x = np.array([-3.0, 1.0, 20.0, 5.0, -0.5, 11.0, 2.0])
    out = np.full_like(x, 7.0)
    launch(clip_negative, (2,), (4,), x, out)
    expected = np.where(x < 0, 0.0, np.where(x > 10, 7.0, x))
    np.testing.assert_array_equal(out, expected)


def test_math_functions(launch):
    x = np.linspace(-5, 5, 301)
    out = np.empty_like(x)
    launch(softplus, (_blocks(x.size, 64),), (64,), x, out)
    np.testing.assert_allclose(out, np.log1p(np.exp(x)) + np.sqrt(np.abs(x)), rtol=1e-12)


@pytest.mark.parametrize(
    ("dtype", "a"),
    [(np.float32, 2.5), (np.int64, 3), (np.float64, np.int32(-2))],
    ids=["float32-float", "int64-int", "float64-int32"],
)
def test_scalar_and_array_types(launch, dtype, a):
    x = np.arange(100).astype(dtype)
    y = np.arange(100, 0, -1).astype(dtype)
    out = np.zeros(100, dtype=dtype)
    launch(axpy, (4,), (32,), a, x, y, out)
    np.testing.assert_allclose(out, (a * x + y).astype(dtype), rtol=1e-6)
    assert out.dtype == dtype


# --- CPU compiler only ---------------------------------------------------------------


def test_cuda_jit_dispatcher_other_spellings_and_subscript_launch():
    x, out = np.arange(50, dtype=np.float64), np.ones(50)
    compile_cpu(axpy_other_spellings)[(2,), (32,)](2.0, x, out)
    np.testing.assert_array_equal(out, 1 + 2.0 * x)


@pytest.mark.parametrize(
    ("pyfunc", "feature"),
    [
        (uses_shared, "cuda.shared.array"),
        (uses_syncthreads, "cuda.syncthreads()"),
        (uses_atomic, "cuda.atomic.add"),
        (uses_local, "cuda.local.array"),
        (uses_device_function, "CUDA device function _device_helper"),
        (uses_dynamic_grid, "cuda.grid() without a literal"),
    ],
)
def test_unsupported_names_the_feature(pyfunc, feature):
    with pytest.raises(Unsupported, match=f"'{pyfunc.__name__}' uses .*{re.escape(feature)}"):
        compile_cpu(pyfunc)


def test_runs_compiled_and_caches_per_kernel_and_launch_dimensionality():
    kernel = compile_cpu(axpy)
    assert isinstance(kernel, CpuKernel)
    assert compile_cpu(axpy) is kernel
    x = np.ones(10)
    kernel((1,), (16,), 1.0, x, x, np.empty(10))
    launcher = kernel.dispatcher(1)
    assert isinstance(launcher, numba.core.registry.CPUDispatcher)
    assert launcher.targetoptions["parallel"] is True
    assert launcher.signatures  # compiled machine code, not Python
    assert kernel.dispatcher(1) is launcher
    assert kernel.dispatcher(2) is not launcher
    assert "prange" in kernel.source(1) and "cuda" not in kernel.source()


def test_closure_variables_are_seen():
    offset = 4.0

    def shifted(x, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + offset

    x = np.arange(5, dtype=np.float64)
    out = np.empty_like(x)
    compile_cpu(shifted)((1,), (8,), x, out)
    np.testing.assert_array_equal(out, x + offset)


def test_bad_launches_say_what_was_given():
    kernel = compile_cpu(axpy)
    x = np.ones(4)
    with pytest.raises(ValueError, match=r"blockdim must be 1 to 3 positive ints, got \(0,\)"):
        kernel((1,), (0,), 1.0, x, x, x)
    with pytest.raises(ValueError, match="griddim"):
        kernel((1, 1, 1, 1), (1,), 1.0, x, x, x)
    with pytest.raises(TypeError, match=r"takes 4 arguments \(a, x, y, out\), got 2"):
        kernel((1,), (4,), x, x)


def _asserts(x, out):
    i = cuda.grid(1)
    assert i < out.size
    out[i] = x[i]


def _calls_numpy(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = np.sqrt(x[i])


def test_may_raise_says_when_a_launch_can_stop_with_part_of_its_output_written():
    # dgvm.launch keeps a copy of the output chunk only for kernels that may raise.
    for pyfunc in (axpy, softplus, clip_negative, scale3, record_indices):
        assert not compile_cpu(pyfunc).may_raise, pyfunc.__name__
    for pyfunc in (_asserts, _calls_numpy):
        assert compile_cpu(pyfunc).may_raise, pyfunc.__name__


KERNEL_FILE = '''
from numba import cuda


def double(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 2 * x[i]
'''


def test_a_kernel_compiles_from_its_source_as_it_was_defined(tmp_path):
    # A worker unpickles the function and compiles it later; the file may have been
    # edited meanwhile (a notebook, a script open in an editor): the lines at the old
    # place are another function by then.
    import importlib.util

    import cloudpickle

    import dgvm

    path = tmp_path / "edited_kernels.py"
    path.write_text(KERNEL_FILE)
    spec = importlib.util.spec_from_file_location("edited_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = cloudpickle.dumps(dgvm.kernel(module.double))
    path.write_text("\n\ndef other(a):\n    return a\n" + KERNEL_FILE)
    kernel = cloudpickle.loads(shipped)
    x = np.arange(8.0)
    out = np.zeros(8)
    kernel.run("cpu", (1,), (8,), [x, out])
    np.testing.assert_array_equal(out, 2 * x)
