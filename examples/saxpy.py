"""y = a*x + y over arrays spread across the cluster, run where each chunk lives.

    python examples/saxpy.py [--n N] [--chunk C] [--backend cpu]     (--help: every option and its default)
"""

from __future__ import annotations

import numpy as np
from numba import cuda

import dgvm
import dgvm.array as dnp


@dgvm.kernel
def saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def run(n: int = 1_000_000, chunk: int = 100_000, a: float = 2.5) -> float:
    """Run saxpy on the connected cluster; return the largest difference from NumPy."""
    rng = np.random.default_rng(0)
    hx = rng.random(n, dtype=np.float32)
    hy = rng.random(n, dtype=np.float32)
    with dnp.from_numpy(hx, chunks=chunk) as x, dnp.from_numpy(hy, chunks=chunk) as y:
        dgvm.launch(saxpy, np.float32(a), x, y, out=y)  # in place: each chunk reads itself
        got = dnp.asnumpy(y)
    return float(np.abs(got - (np.float32(a) * hx + hy)).max())


if __name__ == "__main__":
    from _common import check, cluster, parse

    args = parse(__doc__, n=10_000_000, chunk=1_000_000)
    with cluster(args):
        check("saxpy", run(args.n, args.chunk), 1e-6)
