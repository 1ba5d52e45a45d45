"""The examples run on the test cluster (both backends) and agree with NumPy."""

import ast
import importlib.util
import pathlib
import re
import subprocess
import sys

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


def _size_defaults(name) -> dict:
    """The sizes and defaults an example's ``parse(__doc__, ...)`` call gives."""
    tree = ast.parse((EXAMPLES / f"{name}.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "parse"]
    assert len(calls) == 1, f"{name}: one parse(__doc__, ...) call"
    return {k.arg: ast.literal_eval(k.value) for k in calls[0].keywords}


@pytest.mark.parametrize("name", ["saxpy", "heat_stencil", "matmul"])
def test_example_usage_names_its_options_and_help_its_defaults(name):
    sizes = _size_defaults(name)
    usage = [line for line in load(name).__doc__.splitlines() if f"examples/{name}.py" in line]
    assert len(usage) == 1
    # The usage line names each size option, with no value that could go stale.
    assert re.findall(r"\[--([a-z-]+) [A-Z]+\]", usage[0]) == [k.replace("_", "-") for k in sizes]
    out = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), "--help"],
                         capture_output=True, text=True, timeout=120, cwd=EXAMPLES)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for k, v in sizes.items():
        assert f"--{k.replace('_', '-')} {k.upper().replace('_', '-')} {k} (default: {v})" in text
