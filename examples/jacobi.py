"""Jacobi iteration for A x = b, written as a plain NumPy program.

The only change from the NumPy version is the import: ``import dgvm.array as np``. The
matrix-vector product runs blocked where A's chunks live; the check runs the same
function with NumPy.
"""

import numpy

import dgvm.array as np  # the NumPy version: import numpy as np

from _common import check, cluster, parse


def jacobi(n=2000, iters=50, chunk=500, np=np):
    kw = {"chunks": chunk} if np is not numpy else {}
    diag = 4.0 + 1.0 / n
    A = np.ones((n, n), **kw) / n + 4.0 * np.eye(n, **kw)  # diagonally dominant
    b = np.linspace(-1.0, 1.0, n, **kw)
    x = np.zeros(n, **kw)
    for _ in range(iters):
        x = (b - (A @ x - diag * x)) / diag
    residual = float(np.linalg.norm(A @ x - b))
    return np.asnumpy(x) if np is not numpy else x, residual


def run(n=2000, iters=50, chunk=500) -> float:
    got, residual = jacobi(n, iters, chunk)
    want, _ = jacobi(n, iters, chunk, np=numpy)
    assert residual < 1e-6, residual
    return float(numpy.abs(got - want).max())


if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0], n=2000, iters=50, chunk=500)
    with cluster(args):
        check("jacobi", run(args.n, args.iters, args.chunk), 1e-9)
