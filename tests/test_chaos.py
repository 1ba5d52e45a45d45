"""Chaos: worker processes killed at random points of a seeded random program; nothing is
lost but what had no copy, nothing hangs, nothing leaks (issue 23's proof).

The program is ``benchmarks/chaos.py`` (its docstring says what it checks), run here
shorter: 4 worker processes, each under a nanny that starts a new worker after a kill (a
worker is killed only once it has been up a few seconds, and while at least three are
alive, so two always stay). Every call is bounded (``chaos.BOUND``): one that does not
answer in time is a hang and fails the test."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import cloudpickle
import pytest

import dgvm

SEED = 23
SECONDS = 40.0  # of the program; the cluster's start and close come on top


def _program():
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "chaos.py"
    spec = importlib.util.spec_from_file_location("dgvm_chaos_program", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    cloudpickle.register_pickle_by_value(module)  # its kernels travel to workers that cannot import it
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_killed_workers_lose_only_what_they_held_and_nothing_hangs_or_leaks():
    chaos = _program()
    cluster = dgvm.LocalCluster(n_workers=4, backend="cpu", processes=True, device_memory="64MiB",
                                dashboard_address=None)
    client = dgvm.connect(cluster)
    try:
        run = chaos.run(client, SEED, seconds=SECONDS, kill_every=5.0)
    finally:
        client.close()
        cluster.close()
    c = run.counts
    print("chaos:", c.summary())
    assert not c.hangs, c.hangs
    assert not c.wrong, f"{len(c.wrong)} wrong answers: {c.wrong[:5]}"
    assert not c.errors, f"{len(c.errors)} raw errors: {c.errors[:5]}"
    assert not c.leaks, c.leaks
    left = [a for a in run.arenas.values() if os.path.exists(f"/dev/shm/{a}")]
    assert left == [], f"arenas left after the cluster closed: {left}"
    # The program did what it is for: workers died under it, data was lost and said so.
    assert c.kills >= 2 and c.chunk_lost >= 2 and c.right >= 50, c.summary()
