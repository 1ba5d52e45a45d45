"""The dgvm.array examples: plain NumPy programs run with ``import dgvm.array as np``,
checked against the same code run by NumPy, on both backends."""

import sys

import pytest

from test_examples import EXAMPLES, load

sys.path.insert(0, str(EXAMPLES))  # the examples import their _common module


@pytest.mark.parametrize(
    "name, kwargs, tol",
    [
        ("jacobi", dict(n=300, iters=40, chunk=70), 1e-9),
        ("black_scholes", dict(n=50_000, chunk=12_000), 1e-9),
        ("conjugate_gradient", dict(n=60, chunk=25), 1e-8),
        ("kmeans", dict(n=3_000, k=4, iters=5, chunk=700), 1e-9),
    ],
)
def test_array_example_matches_numpy(case, name, kwargs, tol):
    assert load(name).run(**kwargs) <= tol
