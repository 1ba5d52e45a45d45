"""Blocked matrix product C = A @ B. Each block of C is computed where it lives; the row
panel of A and the column panel of B it needs migrate there (as replicas) on the first
miss. Compared with NumPy.

    python examples/matmul.py [--n N] [--block B] [--backend cpu]     (--help: every option and its default)
"""

from __future__ import annotations

import numpy as np
from numba import cuda

import dgvm
import dgvm.array as dnp


@dgvm.kernel
def matmul(a, b, c):
    # a: the row panel of A for this block of C; b: the column panel of B
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = 0.0
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


def run(n: int = 256, block: int = 64) -> float:
    """Multiply two n x n matrices in block x block tiles; return the largest relative
    difference from NumPy."""
    rng = np.random.default_rng(0)
    ha, hb = rng.random((n, n)), rng.random((n, n))
    with dnp.from_numpy(ha, chunks=block) as a, dnp.from_numpy(hb, chunks=block) as b, \
            dnp.zeros((n, n), chunks=block) as c:
        dgvm.launch(
            matmul,
            dgvm.blocks(a, lambda blk: (blk[0], slice(None))),  # row panel i of A
            dgvm.blocks(b, lambda blk: (slice(None), blk[1])),  # column panel j of B
            out=c,
        )
        got = dnp.asnumpy(c)
    want = ha @ hb
    return float(np.abs(got - want).max() / np.abs(want).max())


if __name__ == "__main__":
    from _common import check, cluster, parse

    args = parse(__doc__, n=1024, block=256)
    with cluster(args):
        check("matmul", run(args.n, args.block), 1e-12)
