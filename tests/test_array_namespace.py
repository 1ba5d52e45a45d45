"""The namespace of dgvm.array: the union of its category files, every name it had."""

import importlib
import pathlib
import types

import dgvm.array as dnp

# The category files that make up dgvm.array's namespace; linalg, fft and random are
# public submodules, interop is NumPy's dispatch into the namespace.
CATEGORIES = [
    "array_object", "constants", "conversion", "correlating", "creation", "cumulative",
    "data_types", "elementwise", "histograms", "indexing", "info", "linear_algebra",
    "manipulation", "order_statistics", "searching", "sets", "sorting", "statistical", "utility",
]
SUBMODULES = ["fft", "interop", "linalg", "random"]

# dgvm.array's public names before it was laid out by category (the standard's 2023.12
# names, NumPy's that programs use most, dgvm's own).
BEFORE = [
    "DArray", "__array_api_version__", "__array_namespace_info__", "abs", "acos", "acosh",
    "add", "all", "any", "arange", "argmax", "argmin", "argsort", "asarray", "asin", "asinh",
    "asnumpy", "astype", "atan", "atan2", "atanh", "bitwise_and", "bitwise_invert",
    "bitwise_left_shift", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "bool",
    "broadcast_arrays", "broadcast_to", "can_cast", "ceil", "clip", "complex128", "complex64",
    "concat", "concatenate", "conj", "copysign", "cos", "cosh", "count_nonzero",
    "cumulative_sum", "diag", "diagonal", "divide", "dot", "e", "empty", "empty_like", "equal",
    "exp", "expand_dims", "expm1", "eye", "finfo", "flip", "float32", "float64", "floor",
    "floor_divide", "from_dask", "from_dlpack", "from_numpy", "full", "full_like", "greater",
    "greater_equal", "hypot", "iinfo", "imag", "inf", "int16", "int32", "int64", "int8",
    "isdtype", "isfinite", "isinf", "isnan", "less", "less_equal", "linspace", "log", "log10",
    "log1p", "log2", "logaddexp", "logical_and", "logical_not", "logical_or", "logical_xor",
    "matmul", "matrix_transpose", "max", "maximum", "mean", "meshgrid", "min", "minimum",
    "moveaxis", "multiply", "nan", "negative", "newaxis", "nextafter", "nonzero", "not_equal",
    "ones", "ones_like", "outer", "permute_dims", "pi", "positive", "pow", "prod", "real",
    "rechunk", "remainder", "repeat", "reshape", "result_type", "roll", "round",
    "searchsorted", "sign", "signbit", "sin", "sinh", "sort", "sqrt", "square", "squeeze",
    "stack", "std", "subtract", "sum", "take", "tan", "tanh", "tensordot", "tile", "to_dask",
    "trace", "transpose", "tril", "triu", "trunc", "uint16", "uint32", "uint64", "uint8",
    "unique_all", "unique_counts", "unique_inverse", "unique_values", "unstack", "var",
    "vecdot", "where", "zeros", "zeros_like",
]


def test_the_namespace_is_the_union_of_the_category_files():
    seen = {}
    for name in CATEGORIES:
        module = importlib.import_module(f"dgvm.array.{name}")
        for n in module.__all__:
            assert n not in seen, f"{n} is in both {seen[n]} and {name}"
            seen[n] = name
    assert sorted(dnp.__all__) == sorted(seen)


def test_every_file_of_the_package_is_a_category_or_a_public_submodule():
    here = pathlib.Path(dnp.__file__).parent
    files = {p.stem for p in here.glob("*.py")} - {"__init__"}
    assert files == set(CATEGORIES) | set(SUBMODULES)


def test_every_name_it_had_is_there_and_every_name_resolves():
    assert not set(BEFORE) - set(dnp.__all__)
    for name in dnp.__all__:
        value = getattr(dnp, name)
        assert not isinstance(value, types.ModuleType), name
    for module in (dnp.fft, dnp.linalg, dnp.random):
        for name in module.__all__:
            getattr(module, name)


def test_the_machinery_is_not_in_the_namespace():
    public = set(dir(dnp))
    for internal in ("blockwise", "blockwise_tasks", "deferred", "fused", "lifecycle", "recycle",
                     "wide_kernel", "zero_size", "views", "per_matrix", "small_reads", "core"):
        assert internal not in public, internal
    modules = {n for n in public if not n.startswith("_") and isinstance(getattr(dnp, n), types.ModuleType)}
    assert modules == set(CATEGORIES) | set(SUBMODULES)
