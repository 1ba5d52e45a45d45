"""The examples run on the test cluster (both backends) and agree with NumPy."""

import importlib.util
import pathlib

import pytest

import dgvm

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "name, kwargs, tol",
    [
        ("saxpy", dict(n=100_000, chunk=7_000), 1e-6),  # uneven last chunk
        ("heat_stencil", dict(n=96, chunk=(40, 32), steps=4), 1e-9),
        ("matmul", dict(n=96, block=40), 1e-12),
    ],
)
def test_example_matches_numpy(case, name, kwargs, tol):
    assert load(name).run(**kwargs) <= tol


def test_matmul_inputs_migrate_to_the_outputs_homes(case):
    before = dgvm.stats()["workers"]
    load("matmul").run(n=96, block=32)
    after = dgvm.stats()["workers"]
    misses = sum(after[w]["misses"] - before.get(w, {}).get("misses", 0) for w in after)
    assert misses > 0  # panels homed elsewhere were fetched where C's blocks live
