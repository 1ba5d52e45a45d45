"""Running totals: a random walk, its running mean and compound growth."""


def inputs(rng):
    return {"steps": rng.standard_normal(3000)}


def run(np, data):
    steps = np.asarray(data["steps"])
    walk = np.cumsum(steps)
    n = np.arange(1, walk.shape[0] + 1)
    running_mean = np.cumsum(walk) / n
    returns = np.diff(walk)
    print("final position", walk[-1])
    print(f"mean of running mean {running_mean.mean():.8f}")
    print("largest step", np.max(np.abs(returns)))
    growth = np.cumprod(1.0 + steps / 100.0)
    print(f"growth factor {growth[-1]:.8f}")
    return {"walk": walk, "running_mean": running_mean, "growth": growth}
