"""2-D heat equation, explicit finite differences, updated in place through views."""


def inputs(rng):
    return {"n": 48, "steps": 30}


def run(np, data):
    n, steps = data["n"], data["steps"]
    u = np.zeros((n, n))
    u[0, :] = 100.0           # a hot top edge
    u[:, 0] = 50.0            # a warm left edge
    alpha = 0.2
    center = u[1:-1, 1:-1]
    for step in range(steps):
        lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * center
        center += alpha * lap
        if step % 10 == 0:
            print(f"step {step}: heat {u.sum():.6f}, centre {float(u[n // 2, n // 2]):.8f}")
    print("max interior", center.max())
    return {"u": u}
