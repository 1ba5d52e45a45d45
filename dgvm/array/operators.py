"""Python operators of ``DArray`` (arithmetic, comparison, bitwise, in-place, reflected)
and the array API's attributes that are not data (``.T``, ``.mT``, ``device``, ...)."""

from __future__ import annotations

# Python operator -> array API function; each gets __op__, __rop__ and __iop__.
_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "pow", "and": "bitwise_and",
    "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift",
}
_COMPARE = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
            "eq": "equal", "ne": "not_equal"}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert"}


def _operand(other):
    """NotImplemented for operands that are not DArrays or Python/NumPy scalars, so that
    Python tries the other side."""
    import numpy as np

    from dgvm.array.darray import DArray

    if isinstance(other, (DArray, bool, int, float, complex, np.generic)):
        return other
    return NotImplemented


def _make_binary(fname):
    def forward(self, other):
        from dgvm.array.elementwise import apply

        other = _operand(other)
        return other if other is NotImplemented else apply(fname, self, other)

    def reflected(self, other):
        from dgvm.array.elementwise import apply

        other = _operand(other)
        return other if other is NotImplemented else apply(fname, other, self)

    def inplace(self, other):
        from dgvm.array.elementwise import apply

        other = _operand(other)
        return other if other is NotImplemented else apply(fname, self, other, out=self)

    return forward, reflected, inplace


def _make_unary(fname):
    def op(self):
        from dgvm.array.elementwise import apply

        return apply(fname, self)

    return op


class ArrayOperators:
    """Mixin of DArray: every operator runs as one distributed elementwise operation."""

    __hash__ = object.__hash__  # comparisons are elementwise, identity stays hashable

    def __matmul__(self, other):
        from dgvm.array.linalg import matmul

        return matmul(self, other)

    def __rmatmul__(self, other):
        from dgvm.array.linalg import matmul

        return matmul(other, self)

    def __imatmul__(self, other):
        from dgvm.array.linalg import matmul

        result = matmul(self, other)
        if result.shape != self.shape:
            result.free()  # nothing left behind
            raise ValueError(f"in-place @ would change the shape {self.shape} to {result.shape}")
        self[...] = result
        return self

    @property
    def T(self):
        if self.ndim != 2:
            raise ValueError(f".T is for 2-d arrays (this one has {self.ndim}); use permute_dims")
        from dgvm.array.manipulation import permute_dims

        return permute_dims(self, (1, 0))

    @property
    def mT(self):
        from dgvm.array.linalg import matrix_transpose

        return matrix_transpose(self)

    @property
    def device(self):
        from dgvm.array.info import default_device

        return default_device()

    def to_device(self, device, /, *, stream=None):
        from dgvm.array.info import default_device

        if device != default_device():
            raise ValueError(f"dgvm.array has one device, {default_device()!r}; asked {device!r}")
        return self

    def __array_namespace__(self, *, api_version=None):
        if api_version not in (None, "2023.12", "2022.12", "2021.12"):
            raise ValueError(f"dgvm.array implements array API 2023.12, not {api_version}")
        import dgvm.array

        return dgvm.array


for _name, _f in _BINARY.items():
    _fw, _rf, _ip = _make_binary(_f)
    setattr(ArrayOperators, f"__{_name}__", _fw)
    setattr(ArrayOperators, f"__r{_name}__", _rf)
    setattr(ArrayOperators, f"__i{_name}__", _ip)
for _name, _f in _COMPARE.items():
    setattr(ArrayOperators, f"__{_name}__", _make_binary(_f)[0])
for _name, _f in _UNARY.items():
    setattr(ArrayOperators, f"__{_name}__", _make_unary(_f))
del _name, _f, _fw, _rf, _ip


def _method(module: str, name: str, ddof: bool = False):
    def method(self, *args, **kwargs):
        import importlib

        if ddof and "ddof" in kwargs:
            kwargs["correction"] = kwargs.pop("ddof")
        if args and name in _AXIS_FIRST:
            kwargs["axis"], args = args[0], args[1:]
        return getattr(importlib.import_module(f"dgvm.array.{module}"), name)(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``dgvm.array.{name}(self, ...)`` (NumPy's method)."
    return method


_AXIS_FIRST = {"sum", "prod", "mean", "var", "std", "max", "min", "all", "any", "argmax", "argmin"}


class ArrayMethods:
    """NumPy's array methods that programs use most, on the dgvm.array functions."""

    sum = _method("reductions", "sum")
    prod = _method("reductions", "prod")
    mean = _method("reductions", "mean")
    var = _method("reductions", "var", ddof=True)
    std = _method("reductions", "std", ddof=True)
    max = _method("reductions", "max")
    min = _method("reductions", "min")
    all = _method("reductions", "all")
    any = _method("reductions", "any")
    argmax = _method("reductions", "argmax")
    argmin = _method("reductions", "argmin")
    astype = _method("elementwise", "astype")
    clip = _method("elementwise", "clip")
    dot = _method("linalg", "dot")
    repeat = _method("manipulation", "repeat")
    take = _method("manipulation", "take")
    squeeze = _method("manipulation", "squeeze")

    def reshape(self, *shape, copy=None):
        from dgvm.array.manipulation import reshape

        return reshape(self, shape[0] if len(shape) == 1 else shape, copy=copy)

    def transpose(self, *axes):
        from dgvm.array.manipulation import transpose

        return transpose(self, (axes[0] if len(axes) == 1 else axes) if axes else None)

    def copy(self):
        from dgvm.array.elementwise import astype

        return astype(self, self.dtype, copy=True)

    def flatten(self):
        return self.reshape(-1, copy=True)

    ravel = flatten

    def cumsum(self, axis=None, dtype=None):
        from dgvm.array.reductions import cumulative_sum

        x = self if axis is not None or self.ndim == 1 else self.reshape(-1)
        return cumulative_sum(x, axis=axis, dtype=dtype)

    def fill(self, value) -> None:
        self[...] = value

    def tolist(self):
        return self.to_numpy().tolist()
