"""NumPy programs run unchanged under ``dgvm.array`` and give NumPy's answers.

Each program of ``tests/programs`` runs twice with the same inputs: under NumPy and under
``dgvm.array`` (on the test cluster). Everything it prints must read the same (its words
exactly, its numbers to within rounding: sums over chunks add in another order), and
every array it returns must equal NumPy's element for element (to within that rounding).
"""

from __future__ import annotations

import copy
import importlib.util
import pathlib
import re

import numpy as np
import pytest

import dgvm.array as dnp

HERE = pathlib.Path(__file__).parent / "programs"
PROGRAMS = sorted(p.stem for p in HERE.glob("*.py") if p.stem != "__init__")
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"dgvm_test_program_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same_text(got: str, want: str) -> None:
    """Same words; numbers equal to within rounding."""
    assert NUMBER.sub("#", got) == NUMBER.sub("#", want), f"\n--- dgvm ---\n{got}\n--- NumPy ---\n{want}"
    g = [float(v) for v in NUMBER.findall(got)]
    w = [float(v) for v in NUMBER.findall(want)]
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9, err_msg=f"\n{got}\nvs NumPy's\n{want}")


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_numpy_program_gives_numpys_answers(case, name, capsys):
    program = _load(name)
    data = program.inputs(np.random.default_rng(20261127))
    want = program.run(np, copy.deepcopy(data))
    want_out = capsys.readouterr().out
    got = program.run(dnp, copy.deepcopy(data))
    got_out = capsys.readouterr().out
    _same_text(got_out, want_out)
    assert got.keys() == want.keys()
    for key in want:
        g = dnp.asnumpy(got[key]) if isinstance(got[key], dnp.DArray) else np.asarray(got[key])
        w = np.asarray(want[key])
        assert g.shape == w.shape and g.dtype == w.dtype, (key, g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=key)
    del got
