"""The standard's fft extension against numpy.fft, element for element: 1-d and n-d
transforms over chunkings that cut the transformed axes and that do not, each norm,
lengths that crop and pad, negative axes; frequencies, shifts, NumPy's dispatch, errors."""

from __future__ import annotations

import dask.config
import numpy as np
import pytest
from dask.utils import parse_bytes
from hypothesis import given, strategies as st

import dgvm.array as dnp
from dgvm.array._engine.fft_ops import Step, joins, limit_bytes, pass_chunks, split
from test_array_api import SETTINGS, chunked, sample

# (shape, chunks): whole axes, cut axes, uneven cuts.
LAYOUTS = [
    ((16,), (16,)),
    ((17,), (5,)),
    ((6, 10), (6, 10)),
    ((6, 10), (4, 3)),
    ((5, 8), (2, 8)),
    ((3, 4, 10), (2, 4, 3)),
    ((4, 5, 6), (4, 5, 6)),
]
DTYPES = ["float32", "float64", "complex64", "complex128"]
ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]


def tol(dtype) -> float:
    # pocketfft on cpu gives NumPy's values exactly; cuFFT's round differently.
    return 2e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


def close(got, want):
    assert isinstance(got, dnp.DArray), type(got)
    got = dnp.asnumpy(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    r = tol(want.dtype)
    np.testing.assert_allclose(got, want, rtol=r, atol=r * max(1.0, float(np.abs(want).max(initial=0))))


def one_d_cases(shape):
    """(axis, n, norm) for an array of ``shape``: defaults, cropping, padding, each norm,
    negative and non-negative axes."""
    m0, m1 = shape[0], shape[-1]
    return [(-1, None, "backward"), (0, max(2, m0 - 2), "ortho"), (-1, m1 + 5, "forward"),
            (-len(shape), None, None), (len(shape) - 1, 3, "ortho")]


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_d_transforms_match_numpy(case, layout, dtype):
    shape, chunks = layout
    a = sample(shape, dtype, seed=len(shape))
    x = dnp.from_numpy(a, chunks=chunks)
    for name in ONE_D:
        if name in ("rfft", "ihfft") and np.dtype(dtype).kind == "c":
            continue  # real input only (test_errors)
        for axis, n, norm in one_d_cases(shape):
            want = getattr(np.fft, name)(a, n=n, axis=axis, norm=norm)
            got = getattr(dnp.fft, name)(x, n=n, axis=axis, norm=norm)
            close(got, want)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_integer_and_bool_input_is_transformed_as_float64(case, dtype):
    a = sample((5, 7), dtype)
    x = dnp.from_numpy(a, chunks=(2, 3))
    for name in ONE_D:
        close(getattr(dnp.fft, name)(x), getattr(np.fft, name)(a))
    close(dnp.fft.fftn(x), np.fft.fftn(a))
    close(dnp.fft.rfftn(x), np.fft.rfftn(a))


ND_LAYOUTS = [
    ((6, 10), (6, 10)),
    ((6, 10), (4, 3)),
    ((3, 4, 10), (2, 4, 3)),
    ((4, 5, 6), (4, 5, 6)),
    ((4, 5, 6), (4, 2, 6)),
]


def n_d_cases(shape):
    """(s, axes, norm): all axes, one, a negative pair out of order, lengths that crop,
    pad and keep (-1)."""
    nd = len(shape)
    return [(None, None, "backward"), (None, (0,), "ortho"), (None, (-1, 0), "forward"),
            ((shape[0] + 3, -1), (0, nd - 1), "ortho"), ((4,) * nd, tuple(range(nd)), None),
            ((3, 5), (-1, -2), "backward")]


@pytest.mark.parametrize("layout", ND_LAYOUTS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_n_d_transforms_match_numpy(case, layout, dtype):
    shape, chunks = layout
    a = sample(shape, dtype, seed=3)
    x = dnp.from_numpy(a, chunks=chunks)
    for s, axes, norm in n_d_cases(shape):
        for name in ("fftn", "ifftn", "rfftn", "irfftn"):
            if name == "rfftn" and np.dtype(dtype).kind == "c":
                continue
            want = getattr(np.fft, name)(a, s=s, axes=axes, norm=norm)
            close(getattr(dnp.fft, name)(x, s=s, axes=axes, norm=norm), want)


@st.composite
def transforms(draw):
    """A function, an array and its chunks, and arguments of the kinds the standard's
    test suite draws: n around the array's size, any axes in any order with s."""
    shape, chunks = draw(chunked(max_dims=3, max_side=7))
    name = draw(st.sampled_from(ONE_D + ["fftn", "ifftn", "rfftn", "irfftn"]))
    real = name in ("rfft", "ihfft", "rfftn")
    dtype = draw(st.sampled_from(["float32", "float64"] if real else DTYPES))
    kw = {"norm": draw(st.sampled_from(["backward", "ortho", "forward"]))}
    if name.endswith("n"):
        axes = draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                                         unique_by=lambda a: a % len(shape)))
        sides = [shape[a] for a in (range(len(shape)) if axes is None else axes)]
        kw["axes"] = axes
        kw["s"] = draw(st.none() | st.tuples(*[st.integers(max(1, m // 2), m * 2) for m in sides]))
        if name == "irfftn" and kw["s"] is None and shape[(axes or [-1])[-1]] < 2:
            kw["s"] = tuple(sides[:-1]) + (3,)  # the default length would be 0
    else:
        kw["axis"] = draw(st.integers(-len(shape), len(shape) - 1))
        kw["n"] = draw(st.none() | st.integers(1, 2 * shape[kw["axis"]] + 2))
        if name in ("irfft", "hfft") and kw["n"] is None and shape[kw["axis"]] < 2:
            kw["n"] = 3
    return name, shape, chunks, dtype, kw, draw(st.integers(0, 2**16))


@SETTINGS
@given(t=transforms())
def test_drawn_transforms_match_numpy(case, t):
    name, shape, chunks, dtype, kw, seed = t
    a = sample(shape, dtype, seed)
    close(getattr(dnp.fft, name)(dnp.from_numpy(a, chunks=chunks), **kw), getattr(np.fft, name)(a, **kw))


def test_repeated_axes_transform_twice_as_numpy(case):
    a = sample((6, 8), "complex128")
    x = dnp.from_numpy(a, chunks=(4, 3))
    close(dnp.fft.fftn(x, axes=(1, 1)), np.fft.fftn(a, axes=(1, 1)))
    close(dnp.fft.ifftn(x, axes=(0, 1, 0)), np.fft.ifftn(a, axes=(0, 1, 0)))


def test_round_trips_give_the_input_back(case):
    a = sample((9, 12), "float64")
    x = dnp.from_numpy(a, chunks=(4, 5))
    close(dnp.fft.irfftn(dnp.fft.rfftn(x), s=a.shape), np.fft.irfftn(np.fft.rfftn(a), s=a.shape))
    np.testing.assert_allclose(dnp.asnumpy(dnp.fft.irfft(dnp.fft.rfft(x), n=12)), a, atol=1e-12)
    np.testing.assert_allclose(dnp.asnumpy(dnp.fft.ifft(dnp.fft.fft(x, axis=0), axis=0)), a, atol=1e-12)
    np.testing.assert_allclose(dnp.asnumpy(dnp.fft.hfft(dnp.fft.ihfft(x), n=12)), a, atol=1e-12)


def test_results_hold_the_transformed_axis_whole(case):
    a = sample((6, 10), "float64")
    x = dnp.from_numpy(a, chunks=(4, 3))
    y = dnp.fft.fft(x, axis=1)
    assert y.chunks == ((4, 2), (10,))
    y = dnp.fft.rfft(x, axis=0, n=9)
    assert y.chunks == ((5,), (3, 3, 3, 1))
    close(y, np.fft.rfft(a, axis=0, n=9))
    y = dnp.fft.fftn(x)  # the last axis, then the first
    assert y.chunks == ((6,), (10,))
    close(y, np.fft.fftn(a))


def test_result_chunks_are_made_where_their_input_lives(case):
    a = sample((12, 10), "float64")
    x = dnp.from_numpy(a, chunks=(2, 10))  # rows spread over the workers, axis 1 whole
    homes = x.alloc.homes()
    assert len(set(homes)) > 1
    assert dnp.fft.fft(x).alloc.homes() == homes  # every read a local view
    x = dnp.from_numpy(a, chunks=(2, 5))  # axis 1 cut: each row block gathered to its first piece
    y = dnp.fft.rfft(x)
    assert y.chunks == ((2,) * 6, (6,))
    assert y.alloc.homes() == x.alloc.homes()[::2]


def test_deferred_and_view_inputs_are_read_as_their_values(case):
    a = sample((6, 10), "float64")
    x = dnp.from_numpy(a, chunks=(4, 3))
    close(dnp.fft.fft(x.T, axis=0), np.fft.fft(a.T, axis=0))
    close(dnp.fft.rfftn(2 * x[::2] + 1), np.fft.rfftn(2 * a[::2] + 1))
    close(dnp.fft.ifft(dnp.fft.fftshift(x), axis=0, n=4), np.fft.ifft(np.fft.fftshift(a), axis=0, n=4))


def test_arrays_with_no_elements_answer_numpy(case):
    a = np.zeros((3, 0))
    x = dnp.zeros((3, 0))
    close(dnp.fft.fft(x, axis=0), np.fft.fft(a, axis=0))
    close(dnp.fft.fft(x, n=4), np.fft.fft(a, n=4))
    close(dnp.fft.rfftn(x, s=(3, 4), axes=(0, 1)), np.fft.rfftn(a, s=(3, 4), axes=(0, 1)))
    assert dnp.fft.fftshift(x).shape == (3, 0)


def test_fftn_of_no_axes_is_a_copy(case):
    a = sample((3, 4), "float64")
    x = dnp.from_numpy(a)
    y = dnp.fft.fftn(x, axes=())
    assert y is not x
    np.testing.assert_array_equal(dnp.asnumpy(y), np.fft.fftn(a, axes=()))


# -- frequencies and shifts ----------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 7, 8, 33])
@pytest.mark.parametrize("d", [1.0, 0.25, 3])
def test_frequencies_match_numpy(case, n, d):
    for name in ("fftfreq", "rfftfreq"):
        want = getattr(np.fft, name)(n, d=d)
        for chunks in ("auto", 3):
            got = getattr(dnp.fft, name)(n, d=d, chunks=chunks)
            assert isinstance(got, dnp.DArray)
            got = dnp.asnumpy(got)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", [((7,), (3,)), ((6, 10), (4, 3)), ((3, 4, 5), (2, 4, 2))], ids=str)
def test_shifts_match_numpy(case, layout):
    shape, chunks = layout
    a = sample(shape, "complex64")
    x = dnp.from_numpy(a, chunks=chunks)
    nd = len(shape)
    for axes in (None, -1, 0, tuple(range(nd)), (-1, 0), (0, 0)):
        for name in ("fftshift", "ifftshift"):
            got = dnp.asnumpy(getattr(dnp.fft, name)(x, axes=axes))
            np.testing.assert_array_equal(got, getattr(np.fft, name)(a, axes=axes))
    y = dnp.fft.ifftshift(dnp.fft.fftshift(x))
    np.testing.assert_array_equal(dnp.asnumpy(y), a)


# -- the namespace and NumPy's dispatch ----------------------------------------------------
def test_the_extension_is_where_the_standard_looks_for_it(case):
    x = dnp.ones(4)
    xp = x.__array_namespace__()
    assert xp.fft is dnp.fft
    assert sorted(dnp.fft.__all__) == sorted([
        "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
        "fftfreq", "rfftfreq", "fftshift", "ifftshift"])
    assert "fft" not in dnp.__all__  # a submodule, not a function of the main namespace


def test_numpy_fft_functions_given_darrays_run_distributed(case):
    a = sample((6, 10), "float64")
    x = dnp.from_numpy(a, chunks=(4, 3))
    close(np.fft.fft(x, 8), np.fft.fft(a, 8))
    close(np.fft.rfft(x, 8, 0, "ortho"), np.fft.rfft(a, 8, 0, "ortho"))
    close(np.fft.fft2(x), np.fft.fft2(a))
    close(np.fft.irfft2(x, s=(6, 7)), np.fft.irfft2(a, s=(6, 7)))
    close(np.fft.ifftn(x, axes=(0,)), np.fft.ifftn(a, axes=(0,)))
    np.testing.assert_array_equal(dnp.asnumpy(np.fft.fftshift(x, axes=1)), np.fft.fftshift(a, axes=1))
    with pytest.raises(TypeError, match="out="):
        np.fft.fft(x, out=np.empty((6, 10), complex))


# -- errors --------------------------------------------------------------------------------
def test_bad_arguments_raise_numpys_error_types(case):
    x = dnp.from_numpy(sample((4, 6), "float64"), chunks=(2, 3))
    z = dnp.from_numpy(sample((4, 6), "complex128"))
    with pytest.raises(TypeError, match="expects a DArray"):
        dnp.fft.fft(np.ones(4))
    with pytest.raises(TypeError, match="rfft transforms real input"):
        dnp.fft.rfft(z)
    with pytest.raises(TypeError, match="ihfft transforms real input"):
        dnp.fft.ihfft(z)
    with pytest.raises(TypeError, match="rfftn transforms real input"):
        dnp.fft.rfftn(z)
    with pytest.raises(ValueError, match="norm must be one of"):
        dnp.fft.fft(x, norm="unitary")
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds"):
        dnp.fft.fft(x, axis=2)
    with pytest.raises(np.exceptions.AxisError, match="axis -3"):
        dnp.fft.ifft(x, axis=-3)
    with pytest.raises(TypeError, match="axis must be an int"):
        dnp.fft.fft(x, axis=1.0)
    with pytest.raises(ValueError, match="n=0 is not a valid number"):
        dnp.fft.fft(x, n=0)
    with pytest.raises(TypeError, match="n must be an int"):
        dnp.fft.fft(x, n=4.0)
    with pytest.raises(ValueError, match="length 1 gives n=0"):
        dnp.fft.irfft(dnp.from_numpy(np.ones((3, 1))))
    with pytest.raises(np.exceptions.AxisError, match="0-d"):
        dnp.fft.fft(dnp.asarray(1.0))
    with pytest.raises(ValueError, match="s has 1 entries for 2 axes"):
        dnp.fft.fftn(x, s=(4,))
    with pytest.raises(ValueError, match="s entry=0"):
        dnp.fft.ifftn(x, s=(0, 3), axes=(0, 1))
    with pytest.raises(np.exceptions.AxisError, match="axes entry 5"):
        dnp.fft.fftn(x, axes=(0, 5))
    with pytest.raises(IndexError, match="at least one axis"):
        dnp.fft.irfftn(x, axes=())
    with pytest.raises(np.exceptions.AxisError, match="axes entry 2"):
        dnp.fft.fftshift(x, axes=2)
    with pytest.raises(ValueError, match="n=0"):
        dnp.fft.fftfreq(0)
    with pytest.raises(TypeError, match="n must be an int"):
        dnp.fft.rfftfreq(4.0)
    with pytest.raises(ValueError, match="must not be zero"):
        dnp.fft.fftfreq(4, d=0)


# -- how passes are cut (no cluster) -------------------------------------------------------
def test_a_pass_gathers_one_cut_axis_and_joins_axes_held_whole():
    chunks = ((4, 2), (10,), (3, 3))
    assert not joins(Step("fft", 0, 6), [], chunks)  # the first step starts a pass
    assert joins(Step("fft", 1, 10), [Step("fft", 2, 6)], chunks)  # axis 1 is whole
    assert not joins(Step("fft", 0, 6), [Step("fft", 2, 6)], chunks)  # axis 0 is cut
    assert joins(Step("fft", 2, 6), [Step("fft", 2, 6)], chunks)  # the pass makes it whole


def test_pass_chunks_cut_other_axes_finer_where_blocks_would_grow():
    # 100 x 1000 complex128 blocks of a 1000 x 1000 axis gathered: 1.6 MB each, under
    # a 1 MB limit cut to 50 rows.
    chunks = ((100,) * 10, (100,) * 10)
    assert pass_chunks(chunks, {1: 1000}, 16, 1 << 20) == ((50,) * 20, (1000,))
    assert pass_chunks(chunks, {1: 1000}, 16, 1 << 30) == ((100,) * 10, (1000,))
    # One row already over the limit: one row per block, never nothing.
    assert pass_chunks(((4,), (8,)), {1: 8}, 16, 16) == ((1, 1, 1, 1), (8,))
    # The limit: the input's largest block in the result's dtype, at least Dask's "auto" size.
    auto = parse_bytes(dask.config.get("array.chunk-size"))  # 128 MiB unless configured
    assert limit_bytes(((8000,), (auto // 8000 + 1,)), 16) == 8000 * (auto // 8000 + 1) * 16
    assert limit_bytes(((10,), (10,)), 16) == auto
    assert split(10, 4) == [4, 3, 3]
    assert split(8, 8) == [8]
