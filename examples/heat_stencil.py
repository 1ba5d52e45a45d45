"""2-D heat equation, explicit steps with halo=1: each chunk reads one cell of its
neighbours, fetched from the workers that hold them. Compared with NumPy.

    python examples/heat_stencil.py [--n N] [--chunk C] [--steps S] [--backend cpu]     (--help: every option and its default)
"""

from __future__ import annotations

import numpy as np
from numba import cuda

import dgvm
import dgvm.array as dnp

ALPHA = 0.1


@dgvm.kernel
def heat_step(origin, u, out):
    # u arrives with one cell of neighbours on each side, except at the array's edges
    i, j = cuda.grid(2)
    n, m = out.shape
    if i < n and j < m:
        ui = i + (0 if origin[0] == 0 else 1)
        uj = j + (0 if origin[1] == 0 else 1)
        c = u[ui, uj]
        up = u[ui - 1, uj] if ui > 0 else c
        down = u[ui + 1, uj] if ui + 1 < u.shape[0] else c
        left = u[ui, uj - 1] if uj > 0 else c
        right = u[ui, uj + 1] if uj + 1 < u.shape[1] else c
        out[i, j] = c + 0.1 * (up + down + left + right - 4 * c)


def numpy_step(u):
    p = np.pad(u, 1, mode="edge")  # insulated edges, as the kernel
    return u + ALPHA * (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * u)


def run(n: int = 256, chunk: int = 64, steps: int = 10) -> float:
    """Run ``steps`` steps on an n x n grid; return the largest difference from NumPy."""
    u0 = np.zeros((n, n))
    u0[n // 4 : n // 2, n // 4 : n // 2] = 100.0  # a hot square
    with dnp.from_numpy(u0, chunks=chunk) as a, dnp.zeros((n, n), chunks=chunk) as b:
        for _ in range(steps):
            dgvm.launch(heat_step, a, out=b, halo=1, pass_origin=True)
            a, b = b, a
        got = dnp.asnumpy(a)
    want = u0
    for _ in range(steps):
        want = numpy_step(want)
    return float(np.abs(got - want).max())


if __name__ == "__main__":
    from _common import check, cluster, parse

    args = parse(__doc__, n=2048, chunk=512, steps=20)
    with cluster(args):
        check("heat_stencil", run(args.n, args.chunk, args.steps), 1e-9)
