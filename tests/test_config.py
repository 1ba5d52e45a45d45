"""Configuration: defaults, schema and docs agree; bad values stop dgvm with a clear error;
``DASK_DGVM__…`` environment variables reach ``dgvm.config.get``."""

import copy
import os
import pathlib
import re
import subprocess
import sys

import dask
import pytest
import yaml

import dgvm
from dgvm import config
from dgvm.protocol.errors import ConfigError
from dgvm.gvat.placement import POLICIES

DOCS = pathlib.Path(__file__).parent.parent / "docs" / "configuration.md"


def leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def schema_leaves(sub: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in sub["properties"].items():
        if v.get("type") == "object":
            out.update(schema_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


DEFAULTS = leaves(config.defaults["dgvm"])
SCHEMA = schema_leaves(config.schema()["properties"]["dgvm"])


def doc_sections() -> dict[str, str]:
    """``### `dgvm.key` `` heading -> the text under it."""
    parts = re.split(r"^### `dgvm\.([^`]+)`\s*$", DOCS.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.fixture
def env(monkeypatch):
    """Set DASK_* variables and make dask.config read them again, as a new process would;
    afterwards put back the config exactly as it was (a refresh alone would also drop what
    modules set at import, e.g. the dashboard's routes)."""
    saved = copy.deepcopy(dask.config.config)

    def set_env(**variables):
        for k, v in variables.items():
            monkeypatch.setenv(k, v)
        dask.config.refresh()

    try:
        yield set_env
    finally:
        monkeypatch.undo()
        dask.config.config.clear()
        dask.config.config.update(saved)


def test_defaults_validate():
    assert leaves(config.validate()) == DEFAULTS


def test_schema_describes_every_default_and_nothing_else():
    assert set(SCHEMA) == set(DEFAULTS)
    for key, sub in SCHEMA.items():
        assert sub.get("description", "").strip(), f"dgvm.{key} has no description in the schema"
        assert "type" in sub or "enum" in sub, f"dgvm.{key} has no type in the schema"


def test_docs_cover_every_option_with_its_default_and_variable():
    sections = doc_sections()
    assert set(sections) == set(DEFAULTS), "docs/configuration.md and dgvm.yaml list different options"
    for key, text in sections.items():
        m = re.search(r"^- default: `([^`]*)`", text, flags=re.M)
        assert m, f"docs: dgvm.{key} gives no default"
        assert yaml.safe_load(m.group(1)) == DEFAULTS[key], f"docs: default of dgvm.{key}"
        assert f"`{config.env_var(key)}=" in text, f"docs: dgvm.{key} lacks its environment variable"


def test_choices_in_the_schema_are_the_registered_ones():
    assert set(SCHEMA["placement.default"]["enum"]) == set(POLICIES)
    assert set(SCHEMA["backend"]["enum"]) == {"auto", "cpu", "cuda"}


def test_bad_environment_value_names_key_value_source_and_what_is_allowed(env):
    env(DASK_DGVM__PLACEMENT__HEADROOM="2")
    with pytest.raises(ConfigError) as info:
        config.validate()
    msg = str(info.value)
    assert "dgvm.placement.headroom = 2" in msg
    assert "DASK_DGVM__PLACEMENT__HEADROOM" in msg
    assert ">= 0 and < 1" in msg
    assert isinstance(info.value, ValueError) and isinstance(info.value, dgvm.DgvmError)


def test_environment_variables_reach_config_get(env):
    env(
        DASK_DGVM__MIGRATION__REHOME_AFTER="5",
        DASK_DGVM__TRANSFER__SAME_HOST="false",
        DASK_DGVM__DEVICE_MEMORY="4GiB",
        DASK_DGVM__ADDRESS_SPACE__BASE="0x200000000",
        DASK_DGVM__DASHBOARD__REFRESH="250ms",
    )
    assert config.get("migration.rehome-after") == 5
    assert config.get("transfer.same-host") is False
    assert config.get_bytes("device-memory") == 4 * 2**30
    assert config.get("address-space.base") == 0x200000000
    assert config.get("dashboard.refresh") == "250ms"
    section = config.validate()  # underscores from the environment are the same keys
    assert section["migration"] == {"rehome-after": 5}


def test_every_bad_value_is_reported_at_once():
    bad = {
        "dgvm.backend": "gpu",
        "dgvm.device-memory": "lots",
        "dgvm.placement.default": "random",
        "dgvm.migration.rehome-after": -1,
        "dgvm.dashboard.refresh": "fast",
        "dgvm.transfer.same-host": "sometimes",
    }
    with dask.config.set(bad), pytest.raises(ConfigError) as info:
        config.validate()
    msg = str(info.value)
    for key, value in bad.items():
        assert f"{key} = {value!r}" in msg
    assert "one of balanced, packed, round_robin" in msg
    assert "an integer >= 0" in msg


def test_unknown_key_is_named_with_the_known_ones():
    with dask.config.set({"dgvm.placement.headrum": 0.2}), pytest.raises(ConfigError) as info:
        config.validate()
    assert "dgvm.placement.headrum" in str(info.value)
    assert "default, headroom" in str(info.value)


def test_worker_flags_are_checked_and_named():
    with pytest.raises(ConfigError, match="--dgvm-device-memory"):
        config.validate({"device-memory": "0B"}, source="the preload option --dgvm-{key}")
    assert config.validate({"device-memory": "2GiB"})["device-memory"] == "2GiB"


def test_connect_and_local_cluster_check_before_starting_anything():
    with dask.config.set({"dgvm.placement.headroom": -0.5}):
        with pytest.raises(ConfigError, match="dgvm.placement.headroom"):
            dgvm.connect("tcp://127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"LocalCluster\(backend=...\)"):
        dgvm.LocalCluster(backend="gpu")


@pytest.mark.parametrize("setting, seconds", [("50us", 50e-6), (0.002, 0.002), ("0.1ns", 1e-6), (None, None)])
def test_connect_sets_the_thread_switch_interval(setting, seconds):
    """dgvm.connect gives the client's event-loop thread its turns (dgvm.client.thread_switch);
    below the interpreter's microsecond it takes one; null leaves the interval alone."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)  # a value no setting here gives
    try:
        with dask.config.set({"dgvm.dispatch.switch-interval": setting}):
            with dgvm.LocalCluster(n_workers=1, backend="cpu", device_memory="64MiB", processes=False,
                                   dashboard_address=None) as cluster, dgvm.connect(cluster):
                assert sys.getswitchinterval() == pytest.approx(seconds or 0.004, rel=1e-3)
    finally:
        sys.setswitchinterval(before)


def test_dgvm_config_command_prints_and_checks():
    def run(**variables):
        return subprocess.run(
            [sys.executable, "-m", "dgvm", "config"], capture_output=True, text=True,
            timeout=60, env={**os.environ, **variables},
        )

    out = run(DASK_DGVM__MIGRATION__REHOME_AFTER="5")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("dgvm.migration.rehome-after"))
    assert row.split() == ["dgvm.migration.rehome-after", "5", "DASK_DGVM__MIGRATION__REHOME_AFTER"]
    assert len(out.stdout.splitlines()) == 2 + len(DEFAULTS)
    bad = run(DASK_DGVM__PLACEMENT__DEFAULT="random")
    assert bad.returncode == 1
    assert "dgvm.placement.default = 'random'" in bad.stderr and "DASK_DGVM__PLACEMENT__DEFAULT" in bad.stderr
