"""Ranking scores: sorting, ranks, ties, and lookups in the sorted order."""


def inputs(rng):
    return {"scores": rng.integers(0, 50, size=1000).astype(float), "queries": [3.0, 10.5, 49.0]}


def run(np, data):
    s = np.asarray(data["scores"])
    order = np.argsort(s, kind="stable")
    ranked = s[order]
    values, counts = np.unique(s, return_counts=True)
    print("distinct scores", values.shape[0], "most common", values[np.argmax(counts)])
    pos = np.searchsorted(ranked, np.asarray(data["queries"]))
    print("positions", pos)
    top = np.sort(s)[::-1][:5]
    print("top five", top)
    print("in the top decile:", np.isin(s, top).sum())
    return {"order": order, "ranked": ranked, "counts": counts}
