"""Bookkeeping through views: slices, reshapes and transposes written in place."""


def inputs(rng):
    return {"m": rng.random((12, 10))}


def run(np, data):
    M = np.array(data["m"])
    M[::2] += 1.0                      # every other row
    flat = M.reshape(-1)               # a view of M's memory
    flat[::7] = 0.0
    M.T[3] *= -1.0                     # a column, through the transpose
    rows = np.split(M, 3)              # three views
    rows[1][...] = rows[1] * 2.0
    block = M[2:5, 4:8]
    block[:] = np.flip(block, axis=1)  # an overlapping assignment
    print("total", M.sum())
    print("column 3 mean", M[:, 3].mean())
    print(M[:2, :4])
    return {"M": M}
