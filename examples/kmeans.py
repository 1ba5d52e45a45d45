"""k-means clustering (Lloyd's algorithm), written as a plain NumPy program.

The only change from the NumPy version is the import: ``import dgvm.array as np``. The
assignment step is broadcasting and an ``argmin``; the update is a one-hot matrix product.
"""

import numpy

import dgvm.array as np  # the NumPy version: import numpy as np

from _common import check, cluster, parse


def blobs(n, k, np=np, **kw):
    """Points around k centres on a circle (deterministic, no random numbers)."""
    i = np.arange(n, **kw)
    label = i % k
    angle = 2.0 * numpy.pi * label / k
    wobble = np.sin(i * 0.7) * 0.3
    x = 5.0 * np.cos(angle) + wobble
    y = 5.0 * np.sin(angle) + np.cos(i * 1.3) * 0.3
    return np.stack([x, y], axis=1)


def kmeans(n=20_000, k=5, iters=10, chunk=5_000, np=np):
    kw = {"chunks": chunk} if np is not numpy else {}
    X = blobs(n, k, np, **kw)
    C = X[:k] * 0.5  # first points, pulled towards the origin
    for _ in range(iters):
        d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)  # (n, k) squared distances
        labels = np.argmin(d, axis=1)
        onehot = (labels[:, None] == np.arange(k)[None, :]).astype(X.dtype)
        counts = onehot.sum(axis=0)
        C = (onehot.T @ X) / np.maximum(counts, 1.0)[:, None]
    return np.asnumpy(C) if np is not numpy else C


def run(n=20_000, k=5, iters=10, chunk=5_000) -> float:
    got = kmeans(n, k, iters, chunk)
    want = kmeans(n, k, iters, chunk, np=numpy)
    return float(numpy.abs(got - want).max())


if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0], n=20_000, k=5, iters=10, chunk=5_000)
    with cluster(args):
        check("kmeans", run(args.n, args.k, args.iters, args.chunk), 1e-9)
