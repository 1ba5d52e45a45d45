"""Ordinary least squares by the normal equations, with summary statistics."""

import numpy


def inputs(rng):
    X = rng.standard_normal((500, 3))
    y = X @ numpy.array([1.5, -2.0, 0.5]) + 0.3 + 0.1 * rng.standard_normal(500)
    return {"X": X, "y": y}


def run(np, data):
    X, y = np.asarray(data["X"]), np.asarray(data["y"])
    A = np.column_stack([np.ones(X.shape[0]), X])
    beta = np.linalg.solve(A.T @ A, A.T @ y)
    fitted = A @ beta
    resid = y - fitted
    r2 = 1.0 - (resid**2).sum() / ((y - y.mean()) ** 2).sum()
    print("coefficients", beta)
    print(f"R^2 = {r2:.10f}")
    C = np.corrcoef(X, rowvar=False)
    print("largest correlation between predictors", np.max(np.abs(C - np.eye(3))))
    print("covariance trace", np.trace(np.cov(X.T)))
    return {"beta": beta, "resid": resid}
