"""dgvm's configuration, read through ``dask.config`` under the ``dgvm`` key.

Defaults live in ``dgvm.yaml`` beside this file and the schema of every option in
``dgvm-schema.yaml``; ``DASK_DGVM__PLACEMENT__HEADROOM=0.2`` style environment variables,
YAML files in Dask's config directories and ``dask.config.set({"dgvm.backend": "cpu"})``
override the defaults. ``validate()`` checks the effective values against the schema; the
scheduler and worker preloads, ``dgvm.LocalCluster`` and ``dgvm.connect`` call it first.
All options: docs/configuration.md.
"""

from __future__ import annotations

import asyncio
import functools
import os

import dask.config
import yaml
from dask.utils import parse_bytes, parse_timedelta

from dgvm.protocol.errors import ConfigError

_here = os.path.dirname(__file__)
_defaults_path = os.path.join(_here, "dgvm.yaml")
_schema_path = os.path.join(_here, "dgvm-schema.yaml")
with open(_defaults_path) as f:
    defaults = yaml.safe_load(f)

dask.config.update_defaults(defaults)


def get(key: str, default=None):
    """Read ``dgvm.<key>``."""
    return dask.config.get(f"dgvm.{key}", default=default)


def get_bytes(key: str) -> int | None:
    value = get(key)
    return None if value is None else to_bytes(value)


def get_seconds(key: str, default=None) -> float | None:
    """``dgvm.<key>``, a duration (``"2ms"``, or seconds as a number), in seconds."""
    value = get(key, default)
    return None if value is None else float(parse_timedelta(value, default="s"))


def to_bytes(value) -> int:
    """Accept ints and strings such as ``"4GiB"``."""
    if isinstance(value, str):
        return parse_bytes(value)
    return int(value)


# -- validation against dgvm-schema.yaml -------------------------------------------------
@functools.cache
def schema() -> dict:
    """The JSON schema of the whole config (``{"properties": {"dgvm": ...}}``), read once;
    callers share it and must not change it."""
    with open(_schema_path) as f:
        return yaml.safe_load(f)


@functools.cache
def _validator():
    import jsonschema

    checker = jsonschema.FormatChecker()

    @checker.checks("bytes", raises=(ValueError, TypeError))
    def _bytes(value):
        return not isinstance(value, str) or parse_bytes(value) > 0

    @checker.checks("timedelta", raises=(ValueError, TypeError, KeyError))
    def _timedelta(value):
        return not isinstance(value, str) or parse_timedelta(value) > 0

    @checker.checks("duration", raises=(ValueError, TypeError, KeyError))
    def _duration(value):  # a timedelta that may be zero
        return not isinstance(value, str) or parse_timedelta(value) >= 0

    s = schema()
    cls = jsonschema.validators.validator_for(s)
    cls.check_schema(s)
    return cls(s, format_checker=checker)


def _canonical(section, sub: dict):
    """``section`` with each key spelled as the schema spells it: Dask keeps whichever of
    ``rehome_after`` / ``rehome-after`` it saw first (an environment variable gives the
    underscore), and treats both as the same key."""
    props = sub.get("properties") if isinstance(sub, dict) else None
    if not isinstance(section, dict) or props is None:
        return section
    out = {}
    for k, v in section.items():
        if k not in props and isinstance(k, str) and k.replace("_", "-") in props:
            k = k.replace("_", "-")
        out[k] = _canonical(v, props.get(k, {}))
    return out


def env_var(key: str) -> str:
    """The environment variable that sets ``dgvm.<key>``: ``placement.headroom`` ->
    ``DASK_DGVM__PLACEMENT__HEADROOM``."""
    return "DASK_" + "__".join(p.upper().replace("-", "_") for p in ["dgvm", *key.split(".")])


def allowed(sub: dict) -> str:
    """What a schema entry allows, in words."""
    if "enum" in sub:
        return "one of " + ", ".join(str(v) for v in sub["enum"])
    types = sub.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    bounds = [
        f"{op} {sub[kw]}"
        for kw, op in (("minimum", ">="), ("exclusiveMinimum", ">"),
                       ("maximum", "<="), ("exclusiveMaximum", "<"))
        if kw in sub
    ]
    fmt = sub.get("format")
    parts = []
    if fmt == "bytes":
        parts.append("a byte count: an integer or a string such as 4GiB or 512MiB (> 0)")
    elif fmt == "timedelta":
        parts.append("a duration: a string such as 1s or 500ms, or seconds as a number (> 0)")
    elif fmt == "duration":
        parts.append("a duration: a string such as 0ms or 2ms, or seconds as a number (>= 0)")
    elif "number" in types:
        parts.append("a number" + (" " + " and ".join(bounds) if bounds else ""))
    elif "integer" in types:
        parts.append("an integer" + (" " + " and ".join(bounds) if bounds else ""))
    if "boolean" in types:
        parts.append("true or false")
    if "null" in types:
        parts.append("null")
    return " or ".join(parts) or sub.get("type", "see docs/configuration.md")


def _source(key: str, source: str | None) -> str:
    if source:
        return f" (from {source.format(key=key)})"
    if env_var(key) in os.environ:
        return f" (from the environment variable {env_var(key)})"
    try:
        files = [str(p) for p in dask.config.paths_containing_key(f"dgvm.{key}")]
    except Exception:  # an older Dask, or an unreadable file: say less
        files = []
    if files:
        return f" (from {', '.join(files)})"
    return " (from dask.config.set or a Dask config file)"


def _explain(error, source: str | None) -> str:
    path = [str(p) for p in list(error.absolute_path)[1:]]  # below "dgvm"
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        where = "dgvm." + ".".join(path) if path else "dgvm"
        unknown = sorted(set(error.instance) - set(known))
        return "; ".join(
            f"{where}.{k}{_source('.'.join([*path, k]), source)} is not a dgvm option; "
            f"the options under {where} are: {', '.join(known)} "
            "(a new option needs an entry in dgvm/dgvm-schema.yaml and docs/configuration.md)"
            for k in unknown
        )
    key = ".".join(path)
    sub = error.schema
    desc = " ".join(str(sub.get("description", "")).split())
    return (
        f"dgvm.{key} = {error.instance!r}{_source(key, source)} is not allowed: "
        f"it must be {allowed(sub)}" + (f". ({desc})" if desc else "")
    )


def validate(overrides: dict | None = None, source: str | None = None) -> dict:
    """Check the effective ``dgvm`` config (with ``overrides``: dotted key -> value, None
    values left out; ``source`` says where they came from, ``{key}`` filled in) against
    the schema. Answer the checked section; raise ``ConfigError`` naming each bad key, its
    value, where it came from and what is allowed."""
    section = _canonical(dask.config.get("dgvm", default={}), schema()["properties"]["dgvm"])
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        d = section
        for p in parents:
            d = d.setdefault(p, {})
        d[leaf] = value
    errors = []
    for e in sorted(_validator().iter_errors({"dgvm": section}), key=lambda e: list(map(str, e.path))):
        key = ".".join(str(p) for p in list(e.absolute_path)[1:])
        # a value not overridden is blamed on its own source (environment, file, set)
        errors.append(_explain(e, source if key in overrides else None))
    if errors:
        raise ConfigError("invalid dgvm configuration:\n  " + "\n  ".join(errors))
    return section


# Close tasks of servers a preload found misconfigured, held until they finish.
_closing: set = set()


async def _close_once_started(server) -> None:
    # A server closed while it starts may still register and then die, and a nanny would
    # restart it: wait for the start (this preload runs inside it) to finish first.
    await server
    await server.close(reason="dgvm-config-error")


def check_in_preload(server, overrides: dict | None = None, source: str | None = None) -> None:
    """In a preload: ``validate(overrides, source)``. A bad configuration closes
    ``server`` (a worker takes its nanny with it) and is raised for Dask to log, rather than
    leaving a scheduler without the GVAT or a worker without its chunk store running on."""
    try:
        validate(overrides, source)
    except ConfigError:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the server's event loop: nothing to close from here
            loop = None
        if loop is not None:
            task = loop.create_task(_close_once_started(server))
            _closing.add(task)
            task.add_done_callback(_closing.discard)
        raise
