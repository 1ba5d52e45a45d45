"""Conjugate gradient on a 1-D Poisson matrix, written as a plain NumPy program.

The only change from the NumPy version is the import: ``import dgvm.array as np``. The
dot products are 0-d arrays that stay on the cluster until ``float()`` asks for them.
"""

import numpy

import dgvm.array as np  # the NumPy version: import numpy as np

from _common import check, cluster, parse


def conjugate_gradient(n=800, chunk=200, tol=1e-10, np=np):
    kw = {"chunks": chunk} if np is not numpy else {}
    A = 2.0 * np.eye(n, **kw) - np.eye(n, k=1, **kw) - np.eye(n, k=-1, **kw)
    b = np.ones(n, **kw)
    x = np.zeros(n, **kw)
    r = b - A @ x
    p = r
    rs = r @ r
    for it in range(n):
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        if float(np.sqrt(rs_new)) < tol:
            break
        p = r + (rs_new / rs) * p
        rs = rs_new
    return (np.asnumpy(x) if np is not numpy else x), it + 1


def run(n=800, chunk=200) -> float:
    got, iters = conjugate_gradient(n, chunk)
    want, _ = conjugate_gradient(n, chunk, np=numpy)
    exact = numpy.linalg.solve(2 * numpy.eye(n) - numpy.eye(n, k=1) - numpy.eye(n, k=-1), numpy.ones(n))
    assert numpy.abs(got - exact).max() < 1e-6 * numpy.abs(exact).max()
    return float(numpy.abs(got - want).max() / numpy.abs(want).max())


if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0], n=800, chunk=200)
    with cluster(args):
        check("conjugate_gradient", run(args.n, args.chunk), 1e-8)
