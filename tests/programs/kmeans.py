"""k-means clustering with bincount for the cluster sizes and sums."""

import numpy


def inputs(rng):
    centers = numpy.array([[0.0, 0.0], [5.0, 5.0], [0.0, 6.0]])
    pts = numpy.concatenate([c + rng.standard_normal((300, 2)) for c in centers])
    return {"points": pts, "init": pts[[0, 300, 600]]}


def run(np, data):
    X = np.asarray(data["points"])
    C = np.asarray(data["init"])
    k = C.shape[0]
    for it in range(10):
        d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
        labels = np.argmin(d, axis=1)
        counts = np.bincount(labels, minlength=k)
        sx = np.bincount(labels, weights=X[:, 0], minlength=k)
        sy = np.bincount(labels, weights=X[:, 1], minlength=k)
        C = np.stack([sx / counts, sy / counts], axis=1)
    inertia = np.min(d, axis=1).sum()
    print("sizes", counts)
    print(f"inertia {inertia:.6f}")
    return {"centers": C, "labels": labels}
