"""The largest eigenvalue of a symmetric matrix by power iteration."""


def inputs(rng):
    a = rng.standard_normal((120, 120))
    return {"a": a + a.T, "v0": rng.random(120)}


def run(np, data):
    A = np.asarray(data["a"])
    v = np.asarray(data["v0"])
    v = v / np.linalg.norm(v)
    lam = 0.0
    for it in range(60):
        w = A @ v
        lam_new = float(v @ w)
        v = w / np.linalg.norm(w)
        if abs(lam_new - lam) < 1e-10 * abs(lam_new):
            break
        lam = lam_new
    print(f"eigenvalue {lam_new:.8f} after {it + 1} iterations")
    residual = np.linalg.norm(A @ v - lam_new * v)
    print("residual", residual)
    return {"v": np.abs(v)}
