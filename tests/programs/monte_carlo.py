"""Monte Carlo estimates: pi from points in the square, and a mean of a function."""


def inputs(rng):
    return {"xy": rng.random((20000, 2)), "z": rng.standard_normal(20000)}


def run(np, data):
    xy = np.asarray(data["xy"])
    x, y = xy[:, 0], xy[:, 1]
    inside = x**2 + y**2 <= 1.0
    pi = 4.0 * np.count_nonzero(inside) / x.shape[0]
    print("pi is about", pi)
    z = np.asarray(data["z"])
    payoff = np.maximum(np.exp(0.2 * z) - 1.0, 0.0)
    est = payoff.mean()
    err = payoff.std() / np.sqrt(z.shape[0])
    print(f"E[max(e^0.2z - 1, 0)] = {est:.6f} +- {err:.6f}")
    running = np.cumsum(inside) * 4.0 / np.arange(1, x.shape[0] + 1)
    print("running estimate at 1000:", running[999])
    return {"running": running, "payoff": payoff}
