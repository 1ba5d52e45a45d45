"""Derivatives of a sampled function by finite differences, with padded edges."""

import numpy


def inputs(rng):
    x = numpy.linspace(0.0, 2 * numpy.pi, 400)
    return {"x": x}


def run(np, data):
    x = np.asarray(data["x"])
    h = float(x[1] - x[0])
    f = np.sin(x) * np.exp(-0.1 * x)
    df = np.empty_like(f)
    df[1:-1] = (f[2:] - f[:-2]) / (2 * h)       # central differences
    df[0] = (f[1] - f[0]) / h
    df[-1] = (f[-1] - f[-2]) / h
    fp = np.pad(f, 1, mode="edge")
    d2 = (fp[2:] - 2 * fp[1:-1] + fp[:-2]) / h**2
    exact = np.exp(-0.1 * x) * (np.cos(x) - 0.1 * np.sin(x))
    print(f"max error of f' {np.max(np.abs(df[1:-1] - exact[1:-1])):.3e}")
    print("first differences sum", np.diff(f).sum())
    print("second derivative at pi", d2[200])
    return {"df": df, "d2": d2}
