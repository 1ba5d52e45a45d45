"""Every Python snippet of the README and docs/ runs as written, as a script of its own.

A snippet is a fenced ``python`` block. It runs with ``python snippet.py`` in a fresh
process on the cpu backend and must exit 0 with no traceback and no error logged (a
program that used the implicit cluster ends silently). A line
``<!-- snippet: a scheduler at tcp://HOST:PORT -->`` just before a block says it attaches
to a running cluster: the test starts one there first (a dgvm cluster of in-process
workers), as the text before the block tells the reader to.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

import dgvm

ROOT = pathlib.Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- snippet: a scheduler at (?P<address>\S+) -->\n)?```python\n(?P<code>.*?)```", re.S)


def snippets():
    for path in DOCS:
        for k, m in enumerate(_BLOCK.finditer(path.read_text())):
            yield pytest.param(m.group("code"), m.group("address"), id=f"{path.name}-{k}")


def test_the_docs_have_snippets():
    assert len(list(snippets())) >= 6


@pytest.mark.slow
@pytest.mark.parametrize("code, address", list(snippets()))
def test_snippet_runs_as_written(tmp_path, code, address):
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "DASK_DGVM__BACKEND": "cpu", "PYTHONPATH": str(ROOT)}

    def run():
        return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)

    if address is None:
        out = run()
    else:
        host, port = address.removeprefix("tcp://").rsplit(":", 1)
        with dgvm.LocalCluster(n_workers=2, backend="cpu", processes=False, host=host,
                               scheduler_port=int(port), dashboard_address=None):
            out = run()
    # A program ends silently: the implicit cluster closes in order (no errors, no tracebacks).
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and " ERROR " not in out.stderr, out.stderr[-3000:]
