"""Conjugate gradients for a symmetric positive definite system."""


def inputs(rng):
    m = rng.standard_normal((100, 100))
    return {"a": m @ m.T + 100 * _eye(100), "b": rng.standard_normal(100)}


def _eye(n):
    import numpy
    return numpy.eye(n)


def run(np, data):
    A, b = np.asarray(data["a"]), np.asarray(data["b"])
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rr = r @ r
    for it in range(200):
        Ap = A @ p
        alpha = rr / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rr_new = r @ r
        if np.sqrt(rr_new) < 1e-10:
            break
        p = r + (rr_new / rr) * p
        rr = rr_new
    print("converged in", it + 1, "iterations")
    print(f"residual {np.linalg.norm(b - A @ x):.3e}")
    return {"x": x}
