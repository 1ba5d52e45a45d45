"""A CUDA kernel generated from a float elementwise tree, four elements per thread.

CuPy's elementwise kernels, ``cupy.fuse``'s among them, give each thread one element:
one load in flight per thread, which leaves an H200 at about 80 % of its copy bandwidth
for any expression (3.3 TB/s against 4.2 for a float64 copy, measured for ``sqrt(x)``,
``((x*2.5+1)*3)-4`` and the benchmark's chain alike). This kernel has each thread load
four elements before it computes one, so four loads are in flight; the loads of one
instruction stay coalesced (element ``k`` of thread ``t`` in a block is
``start + k * blockDim + t``).

It covers trees whose every value, leaf and result is float32 or float64, built from
operations whose C++ spelling gives what CuPy's own ufuncs give (the IEEE operators and
the CUDA math functions those ufuncs call). It compiles without fused multiply-add, so
the tree's own operations round one by one as separate ufuncs do (the math functions'
library code, compiled so too, may then differ from CuPy's in the last bit). Every
operand is spelled once: a duplicated one (``a * a`` for ``square``) would double the
source with each nesting, so ``square`` is left to ``cupy.fuse``. ``source`` answers
None for any other tree, which then runs as ``cupy.fuse``'s kernel. Python scalars are
``double`` kernel arguments cast to the dtype of the operation they enter, as NumPy
casts a Python scalar to the array's dtype.
"""

from __future__ import annotations

import numpy as np

PER_THREAD = 4
THREADS = 256
C_TYPES = {"<f8": "double", "<f4": "float"}

# Tree operation -> C++ over its operands a, b (already cast to the operation's type).
OPS = {
    "add": "({a} + {b})", "subtract": "({a} - {b})", "multiply": "({a} * {b})",
    "divide": "({a} / {b})", "negative": "(-{a})", "positive": "({a})",
    "abs": "fabs({a})", "sqrt": "sqrt({a})", "exp": "exp({a})",
    "expm1": "expm1({a})", "log": "log({a})", "log1p": "log1p({a})", "log2": "log2({a})",
    "log10": "log10({a})", "sin": "sin({a})", "cos": "cos({a})", "tan": "tan({a})",
    "sinh": "sinh({a})", "cosh": "cosh({a})", "tanh": "tanh({a})", "astype": "({a})",
}


def _expr(tree) -> str | None:
    """The C++ value of ``tree`` for element slot ``k`` of the loads, or None."""
    kind = tree[0]
    if kind == "in":
        return f"v{tree[1]}[k]"
    if kind == "arg":
        return f"s{tree[1]}"  # a Python scalar: takes the type of where it enters
    if kind != "call":
        return None
    _, name, args, dtype = tree
    ctype = C_TYPES.get(np.dtype(dtype).str)
    template = OPS.get(name)
    if ctype is None or template is None or len(args) != (2 if "{b}" in template else 1):
        return None
    operands = []
    for a in args:
        sub = _expr(a)
        if sub is None:
            return None
        operands.append(f"(({ctype}){sub})")
    return f"(({ctype}){template.format(**dict(zip('ab', operands)))})"


def source(tree, leaf_dtypes, out_dtype, nscalars: int, name: str = "dgvm_wide") -> str | None:
    """The kernel's CUDA source for a tree (``fused._strip``'s form), or None when the
    tree is not one this kernel covers."""
    leaf_types = [C_TYPES.get(np.dtype(d).str) for d in leaf_dtypes]
    out_type = C_TYPES.get(np.dtype(out_dtype).str)
    if out_type is None or None in leaf_types or tree[0] != "call":
        return None
    value = _expr(tree)
    if value is None:
        return None
    params = [f"const {t}* in{j}" for j, t in enumerate(leaf_types)]
    params += [f"const double s{j}" for j in range(nscalars)]
    params += [f"{out_type}* out", "const long long n"]
    loads = "\n".join(
        f"        {t} v{j}[{PER_THREAD}];" for j, t in enumerate(leaf_types)
    )
    load_each = "\n".join(f"            if (i[k] < n) v{j}[k] = in{j}[i[k]];" for j in range(len(leaf_types)))
    return f"""
extern "C" __global__ void {name}({", ".join(params)}) {{
    const long long step = (long long)gridDim.x * blockDim.x * {PER_THREAD};
    for (long long start = (long long)blockIdx.x * blockDim.x * {PER_THREAD}; start < n; start += step) {{
        long long i[{PER_THREAD}];
{loads}
        // Every load first: {PER_THREAD} in flight per thread.
        #pragma unroll
        for (int k = 0; k < {PER_THREAD}; ++k) {{
            i[k] = start + (long long)k * blockDim.x + threadIdx.x;
{load_each}
        }}
        #pragma unroll
        for (int k = 0; k < {PER_THREAD}; ++k) {{
            if (i[k] < n) out[i[k]] = ({out_type}){value};
        }}
    }}
}}
"""


def build(tree, leaf_dtypes, out_dtype, nscalars: int):
    """A callable ``run(leaves, scalars, target) -> bool`` for the tree, or None. It
    answers False, running nothing, unless every leaf is a C-contiguous array of the
    target's size and the target is contiguous too: the kernel runs over their memory as
    one flat run of elements, whatever their shapes."""
    code = source(tree, leaf_dtypes, out_dtype, nscalars)
    if code is None:
        return None
    import cupy  # optional: only cuda workers have it, and only they get here

    # No contraction of a * b + c into one rounding: each operation rounds as NumPy's and
    # CuPy's separate ufuncs do.
    kernel = cupy.RawKernel(code, "dgvm_wide", options=("--fmad=false",))

    def run(leaves, scalars, target) -> bool:
        n = target.size
        if not target.flags.c_contiguous or not all(
            a.size == n and a.flags.c_contiguous for a in leaves
        ):
            return False
        per_block = THREADS * PER_THREAD
        blocks = min(-(-n // per_block), 2**31 - 1)
        kernel((blocks,), (THREADS,), (*leaves, *(float(s) for s in scalars), target, np.int64(n)))
        return True

    return run
