"""European option prices (Black-Scholes), written row by row into preallocated arrays."""


def inputs(rng):
    return {
        "spot": rng.uniform(50.0, 150.0, size=400),
        "strikes": [80.0, 95.0, 100.0, 110.0, 125.0],
        "t": rng.uniform(0.1, 2.0, size=400),
    }


def cnd(np, d):
    # Abramowitz and Stegun 26.2.17, as many pricing codes carry it
    a1, a2, a3, a4, a5 = 0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429
    k = 1.0 / (1.0 + 0.2316419 * np.absolute(d))
    w = 1.0 - 1.0 / np.sqrt(2 * np.pi) * np.exp(-d * d / 2.0) * (
        a1 * k + a2 * k**2 + a3 * np.power(k, 3) + a4 * k**4 + a5 * k**5)
    return np.where(d < 0, 1.0 - w, w)


def run(np, data):
    spot, t = np.asarray(data["spot"]), np.asarray(data["t"])
    strikes = data["strikes"]
    r, sigma = 0.02, 0.3
    CALL = np.zeros((len(strikes), spot.shape[0]))
    PUT = np.zeros_like(CALL)
    for i, k in enumerate(strikes):
        d1 = (np.log(spot / k) + (r + 0.5 * sigma**2) * t) / (sigma * np.sqrt(t))
        d2 = d1 - sigma * np.sqrt(t)
        out = CALL[i]
        out[...] = spot * cnd(np, d1) - k * np.exp(-r * t) * cnd(np, d2)
        PUT[i, :] = CALL[i] - spot + k * np.exp(-r * t)   # put-call parity
        print(f"strike {k}: mean call {CALL[i].mean():.6f}, mean put {PUT[i].mean():.6f}")
    print("most valuable call", np.amax(CALL))
    return {"call": CALL, "put": PUT}
