"""NumPy's legacy random API in dgvm.array.random (seed, rand, randn, randint, random,
random_sample, uniform, normal, standard_normal, choice) with NumPy's call forms: dgvm's
own stream, so the checks are reproducibility under seed(), shapes, dtypes, ranges and
moments, and NumPy's errors; and that no draw gathers an array to the caller."""

from __future__ import annotations

import numpy as np
import pytest

import dgvm.array as dnp
from dgvm.array._engine.core import ArrayCore

R = dnp.random

# Each legacy call with NumPy's argument forms, and what NumPy's gives: (shape, dtype).
CALLS = [
    ("rand(3, 4)", lambda: R.rand(3, 4), (3, 4), np.float64),
    ("randn(5)", lambda: R.randn(5), (5,), np.float64),
    ("randn(2, 3, 4)", lambda: R.randn(2, 3, 4), (2, 3, 4), np.float64),
    ("randint(0, 10, size=(4, 5))", lambda: R.randint(0, 10, size=(4, 5)), (4, 5), np.int64),
    ("randint(7, size=6)", lambda: R.randint(7, size=6), (6,), np.int64),
    ("randint(-3, 3, (2, 2), np.int16)", lambda: R.randint(-3, 3, (2, 2), np.int16), (2, 2), np.int16),
    ("random(8)", lambda: R.random(8), (8,), np.float64),
    ("random_sample((2, 3))", lambda: R.random_sample((2, 3)), (2, 3), np.float64),
    ("uniform(-1, 2, 10)", lambda: R.uniform(-1, 2, 10), (10,), np.float64),
    ("normal(3, 2, (4,))", lambda: R.normal(3, 2, (4,)), (4,), np.float64),
    ("standard_normal((2, 2))", lambda: R.standard_normal((2, 2)), (2, 2), np.float64),
    ("choice(10, 5)", lambda: R.choice(10, 5), (5,), np.int64),
    ("choice(10, (2, 3), replace=False)", lambda: R.choice(10, (2, 3), replace=False), (2, 3), np.int64),
    ("choice(4, 6, p=[...])", lambda: R.choice(4, 6, p=[0.1, 0.2, 0.3, 0.4]), (6,), np.int64),
    ("choice([1.5, 2.5, 4.0], 3)", lambda: R.choice([1.5, 2.5, 4.0], 3), (3,), np.float64),
]


@pytest.mark.parametrize("name,call,shape,dtype", CALLS, ids=[c[0] for c in CALLS])
def test_seeded_calls_repeat_with_numpys_shapes_and_dtypes(case, name, call, shape, dtype):
    R.seed(11)
    first = dnp.asnumpy(call())
    R.seed(11)
    again = dnp.asnumpy(call())
    later = dnp.asnumpy(call())  # the stream moves on
    R.seed(12)
    other = dnp.asnumpy(call())
    np.testing.assert_array_equal(first, again)
    assert first.shape == shape and first.dtype == dtype
    if first.size > 4 or dtype == np.float64:
        assert not np.array_equal(first, later) and not np.array_equal(first, other)


def test_no_size_gives_one_numpy_scalar(case):
    R.seed(3)
    for value, kind in ((R.rand(), np.float64), (R.randn(), np.float64), (R.random(), np.float64),
                        (R.random_sample(), np.float64), (R.uniform(2, 3), np.float64), (R.normal(), np.float64),
                        (R.standard_normal(), np.float64), (R.randint(4), np.int64), (R.choice(4), np.int64),
                        (R.choice([1.5, 2.5]), np.float64), (R.choice(4, p=[0, 0, 1, 0]), np.int64),
                        (R.choice(4, replace=False), np.int64)):
        assert type(value) is kind, (value, kind)
    assert 2 <= R.uniform(2, 3) < 3 and R.choice(4, p=[0, 0, 1, 0]) == 2


def test_distributions(case):
    R.seed(2024)
    n = 200_000
    u = dnp.asnumpy(R.rand(400, 500))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n) and abs(u.var() - 1 / 12) < 0.002
    z = dnp.asnumpy(R.randn(n))
    assert abs(z.mean()) < 4 / np.sqrt(n) and abs(z.std() - 1) < 0.01
    assert abs((z < 1.0).mean() - 0.8413) < 0.005  # the normal CDF at 1
    g = dnp.asnumpy(R.normal(-2.0, 0.5, (n,)))
    assert abs(g.mean() + 2.0) < 4 * 0.5 / np.sqrt(n) and abs(g.std() - 0.5) < 0.005
    s = dnp.asnumpy(R.standard_normal(n))
    assert abs(s.mean()) < 4 / np.sqrt(n) and abs(s.var() - 1) < 0.02
    v = dnp.asnumpy(R.uniform(-1.0, 3.0, n))
    assert -1.0 <= v.min() and v.max() < 3.0 and abs(v.mean() - 1.0) < 0.02 and abs(v.var() - 16 / 12) < 0.02
    r = dnp.asnumpy(R.random_sample(n))
    assert 0.0 <= r.min() and r.max() < 1.0 and abs(r.mean() - 0.5) < 0.005
    k = dnp.asnumpy(R.randint(-3, 7, n))
    assert k.min() == -3 and k.max() == 6
    assert np.abs(np.bincount(k + 3) / n - 0.1).max() < 0.005
    b = dnp.asnumpy(R.randint(2, size=n, dtype=np.uint8))
    assert b.dtype == np.uint8 and set(np.unique(b)) == {0, 1} and abs(b.mean() - 0.5) < 0.005


def test_choice_distributions(case):
    R.seed(7)
    n = 100_000
    c = dnp.asnumpy(R.choice(5, n))
    assert set(np.unique(c)) == set(range(5)) and np.abs(np.bincount(c) / n - 0.2).max() < 0.006
    p = np.array([0.5, 0.0, 0.2, 0.3])
    w = dnp.asnumpy(R.choice(4, n, p=p))
    np.testing.assert_allclose(np.bincount(w, minlength=4) / n, p, atol=0.006)
    assert not (w == 1).any()  # weight 0: never drawn
    pop = np.array([10.0, -1.0, 2.5, 7.0, 3.0, 8.0, 1e9])
    x = dnp.from_numpy(pop, chunks=3)  # a population over several workers
    drawn = dnp.asnumpy(R.choice(x, (300, 200), chunks=(70, 90)))
    assert drawn.shape == (300, 200) and drawn.dtype == pop.dtype and set(np.unique(drawn)) == set(pop)
    counts = np.array([(drawn == e).mean() for e in pop])
    assert np.abs(counts - 1 / 7).max() < 0.006
    pd = dnp.from_numpy(np.array([0.0, 0.0, 0.5, 0.0, 0.0, 0.25, 0.25]), chunks=2)  # p as a DArray
    wd = dnp.asnumpy(R.choice(x, n, p=pd))
    np.testing.assert_allclose([(wd == 2.5).mean(), (wd == 8.0).mean(), (wd == 1e9).mean()], [0.5, 0.25, 0.25], atol=0.006)


def test_choice_without_replacement(case):
    R.seed(9)
    perm = dnp.asnumpy(R.choice(1000, 1000, replace=False))
    np.testing.assert_array_equal(np.sort(perm), np.arange(1000))  # all of them, each once
    assert not np.array_equal(perm, np.arange(1000))
    part = dnp.asnumpy(R.choice(50_000, 3000, replace=False))
    assert len(np.unique(part)) == 3000 and 0 <= part.min() and part.max() < 50_000
    assert abs(part.mean() - 25_000) < 4 * 50_000 / np.sqrt(12 * 3000)
    # weighted: items of weight 3 are drawn about three times as often as those of weight 1
    # (k << n), items of weight 0 never
    weights = np.r_[np.zeros(100), np.ones(450), 3 * np.ones(450)]
    picks = dnp.asnumpy(R.choice(1000, 100, replace=False, p=weights / weights.sum()))
    assert len(np.unique(picks)) == 100 and picks.min() >= 100
    heavy = (picks >= 550).mean()
    assert 0.6 < heavy < 0.9  # 0.75 expected
    pool = dnp.from_numpy(np.arange(20.0) * 10, chunks=6)
    few = dnp.asnumpy(R.choice(pool, 20, replace=False))
    np.testing.assert_array_equal(np.sort(few), np.arange(20.0) * 10)


def test_bad_arguments_get_numpys_errors(case):
    with pytest.raises(TypeError, match="each dimension must be an int or a tuple of ints, got"):
        R.rand(2.5)
    with pytest.raises(TypeError, match="size must be an int or a tuple of ints, got 2.0"):
        R.randint(5, size=2.0)
    with pytest.raises(ValueError, match="below high"):
        R.randint(5, 5, 3)
    with pytest.raises(ValueError, match="a cannot be empty unless no samples are taken"):
        R.choice(0, 3)
    with pytest.raises(ValueError, match="non-negative integer"):
        R.choice(-2, 3)
    with pytest.raises(ValueError, match="1-dimensional or an integer"):
        R.choice(np.ones((2, 2)), 3)
    with pytest.raises(ValueError, match="larger sample .4. than the population .3."):
        R.choice(3, 4, replace=False)
    with pytest.raises(ValueError, match="a and p must have the same size"):
        R.choice(5, 3, p=[0.5, 0.5])
    with pytest.raises(ValueError, match="probabilities are not non-negative"):
        R.choice(3, 2, p=[-0.5, 1.0, 0.5])
    with pytest.raises(ValueError, match="probabilities do not sum to 1"):
        R.choice(3, 2, p=[0.2, 0.2, 0.2])
    with pytest.raises(ValueError, match="probabilities do not sum to 1"):
        R.choice(3, 2, p=dnp.asarray([0.2, 0.2, 0.2]))
    with pytest.raises(ValueError, match="fewer non-zero entries in p than size"):
        R.choice(3, 3, replace=False, p=[0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="p must be 1-dimensional"):
        R.choice(4, 3, p=np.full((2, 2), 0.25))
    none = R.choice(0, 0)
    assert none.shape == (0,) and none.dtype == np.int64


def test_no_draw_gathers_an_array_to_the_caller(case, monkeypatch):
    pop = dnp.from_numpy(np.arange(30.0), chunks=7)
    p = dnp.from_numpy(np.full(30, 1 / 30), chunks=8)
    to_numpy = ArrayCore.to_numpy

    def one_value_at_most(self):  # a sum or a count is read; nothing with more elements
        if self.size > 1:
            raise AssertionError(f"gathered an array of shape {self.shape} to the caller")
        return to_numpy(self)

    monkeypatch.setattr(ArrayCore, "to_numpy", one_value_at_most)
    R.seed(1)
    results = [R.rand(20, 30), R.randn(40), R.randint(3, 9, (5, 6)), R.uniform(0, 1, 50), R.choice(30, 40),
               R.choice(pop, (4, 5)), R.choice(pop, 50, p=p), R.choice(pop, 10, replace=False, p=p),
               R.choice(30, 12, replace=False)]
    for r in results:
        r.persist().wait()
    monkeypatch.undo()
    assert set(dnp.asnumpy(results[5]).ravel()) <= set(range(30))
