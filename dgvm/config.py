"""dgvm's configuration, read through ``dask.config`` under the ``dgvm`` key.

Defaults live in ``dgvm.yaml`` beside this file; ``DASK_DGVM__PLACEMENT__HEADROOM=0.2``
style environment variables and ``dask.config.set({"dgvm.backend": "cpu"})`` override them.
"""

from __future__ import annotations

import os

import dask.config
import yaml
from dask.utils import parse_bytes

_defaults_path = os.path.join(os.path.dirname(__file__), "dgvm.yaml")
with open(_defaults_path) as f:
    defaults = yaml.safe_load(f)

dask.config.update_defaults(defaults)


def get(key: str, default=None):
    """Read ``dgvm.<key>``."""
    return dask.config.get(f"dgvm.{key}", default=default)


def get_bytes(key: str) -> int | None:
    value = get(key)
    return None if value is None else to_bytes(value)


def to_bytes(value) -> int:
    """Accept ints and strings such as ``"4GiB"``."""
    if isinstance(value, str):
        return parse_bytes(value)
    return int(value)
