"""Colours, labels and small helpers the panels share."""

from __future__ import annotations

import numpy as np
from bokeh.models import ColumnDataSource
from bokeh.palettes import Category10, Category20b
from dask.utils import format_bytes

WORKER_COLORS = Category10[10]
KEY_COLORS = Category20b[20]
OTHER_COLOR = "#9e9e9e"  # memory used by others
REPLICA_COLOR = "#c7c7c7"  # read replicas
LOST_COLOR = "#3b3b3b"  # chunks homed on a worker that left
TIER_COLORS = {"device": "#1f77b4", "host": "#ff7f0e", "disk": "#2ca02c"}


def short(address: str) -> str:
    return address.split("://", 1)[-1]


def worker_label(w: dict) -> str:
    return f"{short(w['address'])} {w['device']}"


def worker_colors(addresses) -> dict[str, str]:
    """One colour per worker, by address order, the same on every panel."""
    return {a: WORKER_COLORS[i % len(WORKER_COLORS)] for i, a in enumerate(sorted(addresses))}


def key_color(key: str, keys) -> str:
    """Tiers have their own colours; other keys take the palette's five hues first, then
    their lighter shades, so that neighbours in a stack differ."""
    if key in TIER_COLORS:
        return TIER_COLORS[key]
    i = sorted(keys).index(key) % len(KEY_COLORS)
    return KEY_COLORS[(i % 5) * 4 + (i // 5) % 4]


def layout_label(a: dict) -> str:
    """"float64 (64, 48)" for an array, "bytes" for a buffer."""
    if a.get("shape") is None:
        return "bytes"
    return f"{np.dtype(a['dtype']).name} {tuple(a['shape'])}"


def fmt_bytes(n) -> str:
    return format_bytes(int(n))


def set_data(source: ColumnDataSource, data: dict) -> bool:
    """Send ``data`` to the browser only when it differs from what is there."""
    if dict(source.data) == data:
        return False
    source.data = data
    return True
