"""dgvm.array.random: the Philox4x32-10 generator against Random123's known answers,
values that depend on (seed, call, flat index) only (not on chunks, placement or the
number of workers), calls that advance the stream, distributions within tolerance."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.array import random as drandom
from dgvm.array._engine.lifecycle import drain_releases

ROOT = pathlib.Path(__file__).parent.parent


@pytest.mark.parametrize("counter,key,want", [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(counter, key, want):
    words = drandom.philox4x32(tuple(np.asarray([c], np.uint64) for c in counter), key, np)
    assert tuple(int(w[0]) for w in words) == want


def draws(rng, chunks, client=None):
    """One array of every kind, as NumPy."""
    kw = {"chunks": chunks, "client": client}
    out = [rng.random((30, 20), **kw), rng.random((30, 20), np.float32, **kw),
           rng.uniform(-2.0, 5.0, (30, 20), **kw), rng.normal(1.0, 2.0, (30, 20), **kw),
           rng.integers(-7, 100, (30, 20), np.int16, **kw),
           rng.integers(0, 2**64 - 1, (30, 20), np.uint64, endpoint=True, **kw)]
    return [dnp.asnumpy(x) for x in out]


def test_values_depend_on_seed_and_call_only(case):
    a = draws(dnp.random.default_rng(42), (30, 20))
    b = draws(dnp.random.default_rng(42), (7, 9))  # other chunks, other placement
    c = draws(dnp.random.default_rng(43), (30, 20))
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x, z)
    # the flat index decides: a 1-d draw holds the same numbers
    flat = dnp.asnumpy(dnp.random.default_rng(42).random(600, chunks=(111,)))
    np.testing.assert_array_equal(flat, a[0].reshape(-1))
    # a scalar draw is element 0 of that call
    assert dnp.random.default_rng(42).random() == a[0][0, 0]


def test_same_values_on_another_cluster(case):
    """Two workers instead of three, other capacities: the same numbers."""
    here = draws(dnp.random.default_rng(7), (11, 8), client=case.client)
    cluster = dgvm.LocalCluster(n_workers=2, backend="cpu", processes=False, dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        there = draws(dnp.random.default_rng(7), (30, 5), client=client)
    finally:
        drain_releases()  # its arrays are unreachable: let them go before it closes
        client.close()
        cluster.close()
    for x, y in zip(here, there):
        if case.backend == "cuda" and x.dtype.kind == "f":
            # The other cluster is cpu: the same bits go through CuPy's and NumPy's log
            # and cos (normal), which may differ in the last place.
            np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-15)
        else:
            np.testing.assert_array_equal(x, y)


def test_calls_advance_and_seed_resets(case):
    dnp.random.seed(5)
    first = dnp.asnumpy(dnp.random.random(50, chunks=(20,)))
    second = dnp.asnumpy(dnp.random.random(50, chunks=(20,)))
    assert not np.array_equal(first, second)
    dnp.random.seed(5)
    np.testing.assert_array_equal(dnp.asnumpy(dnp.random.random(50)), first)
    np.testing.assert_array_equal(dnp.asnumpy(dnp.random.random(50, chunks=(7,))), second)
    unseeded = [dnp.asnumpy(dnp.random.default_rng().random(10)) for _ in range(2)]
    assert not np.array_equal(*unseeded)
    g = dnp.random.default_rng(1)
    assert dnp.random.default_rng(g) is g


def test_distributions(case):
    rng = dnp.random.default_rng(2024)
    n = 200_000
    u = dnp.asnumpy(rng.random(n, chunks=(30_000,)))
    assert u.dtype == np.float64 and 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.002
    f = dnp.asnumpy(rng.random(n, dtype=np.float32))
    assert f.dtype == np.float32 and 0.0 <= f.min() and f.max() < 1.0
    assert abs(f.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
    z = dnp.asnumpy(rng.normal(3.0, 2.0, (400, 500), chunks=(100, 200)))
    assert abs(z.mean() - 3.0) < 4 * 2.0 / np.sqrt(n)
    assert abs(z.std() - 2.0) < 0.02
    assert abs(((z - 3) / 2 < 1.0).mean() - 0.8413) < 0.005  # the normal CDF at 1
    v = dnp.asnumpy(rng.uniform(-1.0, 3.0, n))
    assert -1.0 <= v.min() and v.max() < 3.0 and abs(v.mean() - 1.0) < 0.02
    k = dnp.asnumpy(rng.integers(-3, 7, n, dtype=np.int8))
    assert k.dtype == np.int8 and k.min() == -3 and k.max() == 6
    freq = np.bincount(k.astype(np.int64) + 3) / n
    assert np.abs(freq - 0.1).max() < 0.005
    e = dnp.asnumpy(rng.integers(5, size=1000, endpoint=True, chunks=(300,)))
    assert set(np.unique(e)) == {0, 1, 2, 3, 4, 5}
    b = dnp.asnumpy(rng.integers(0, 2, 1000, dtype=bool))
    assert b.dtype == bool and 400 < b.sum() < 600
    s = dnp.random.standard_normal((3, 4))
    assert s.shape == (3, 4) and s.dtype == np.float64
    assert isinstance(rng.normal(), np.float64) and isinstance(rng.integers(10), np.int64)


def test_bad_arguments_say_what_is_allowed(case):
    rng = dnp.random.default_rng(0)
    with pytest.raises(ValueError, match="below high"):
        rng.integers(5, 5, 10)
    with pytest.raises(ValueError, match="does not fit int8"):
        rng.integers(0, 300, 10, dtype=np.int8)
    with pytest.raises(TypeError, match="float64 or float32"):
        rng.random(10, dtype=np.int32)
    with pytest.raises(TypeError, match="integer or bool"):
        rng.integers(0, 3, 10, dtype=np.float64)
    with pytest.raises(ValueError, match="scale"):
        rng.normal(0.0, -1.0, 10)
    with pytest.raises(TypeError, match="must be an int"):
        rng.integers(0.5, 3, 10)
    none = rng.random((0, 3))  # no element: an empty array held on the caller
    assert none.shape == (0, 3) and dnp.asnumpy(none).shape == (0, 3)


SEED_FIRST = """
import numpy as np
from distributed import default_client
import dgvm, dgvm.array as xp
if __name__ == "__main__":
    xp.random.seed(0)  # before any cluster: none is started for it
    try:
        default_client()
        print("seed() started a cluster")
    except ValueError:
        pass
    cluster = dgvm.LocalCluster(n_workers=2, backend="cpu", processes=False, dashboard_address=None)
    client = dgvm.connect(cluster)
    a = xp.asnumpy(xp.random.random(5))
    xp.random.seed(0)
    b = xp.asnumpy(xp.random.random(5))
    print("seeded draws repeat:", np.array_equal(a, b))
    client.close(); cluster.close()
"""


def test_seed_before_connecting_seeds_the_next_connection(tmp_path):
    script = tmp_path / "seed_first.py"
    script.write_text(SEED_FIRST)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "seed() started a cluster" not in out.stdout
    assert "seeded draws repeat: True" in out.stdout
