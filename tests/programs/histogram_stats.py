"""Describing a sample: histogram, quantiles, trimmed statistics."""


def inputs(rng):
    return {"sample": rng.standard_normal(5000) * 2.0 + 1.0}


def run(np, data):
    s = np.asarray(data["sample"])
    counts, edges = np.histogram(s, bins=20, range=(-7.0, 9.0))
    print("counts", counts)
    print("median", np.median(s), "IQR", np.percentile(s, 75) - np.percentile(s, 25))
    q = np.quantile(s, [0.05, 0.5, 0.95])
    print("quantiles", q)
    lo, hi = np.percentile(s, [5, 95])
    trimmed = s[(s > lo) & (s < hi)]
    print(f"trimmed mean {trimmed.mean():.8f} over {trimmed.shape[0]} values")
    bins = np.digitize(s, edges[1:-1])
    print("most common bin", np.argmax(np.bincount(bins)))
    return {"counts": counts, "edges": edges, "q": q}
