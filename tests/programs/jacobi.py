"""Solving a diagonally dominant system by Jacobi iteration."""


def inputs(rng):
    n = 80
    a = rng.random((n, n))
    a += n * numpy_eye(n)
    return {"a": a, "b": rng.random(n)}


def numpy_eye(n):
    import numpy
    return numpy.eye(n)


def run(np, data):
    A, b = np.asarray(data["a"]), np.asarray(data["b"])
    D = np.diag(A)
    R = A - np.diag(D)
    x = np.zeros_like(b)
    for it in range(100):
        x_new = (b - R @ x) / D
        if np.allclose(x, x_new, rtol=1e-12, atol=1e-14):
            break
        x = x_new
    print("iterations", it + 1)
    print("residual", np.linalg.norm(A @ x_new - b))
    exact = np.linalg.solve(A, b)
    print("agrees with solve:", bool(np.allclose(x_new, exact)))
    return {"x": x_new}
