"""Colours, labels and small helpers the panels share."""

from __future__ import annotations

import numpy as np
from bokeh.models import ColumnDataSource, CustomJS, DataTable
from bokeh.palettes import Category10, Category20b
from dask.utils import format_bytes

WORKER_COLORS = Category10[10]
KEY_COLORS = Category20b[20]
OTHER_COLOR = "#9e9e9e"  # memory used by others
REPLICA_COLOR = "#c7c7c7"  # read replicas
LOST_COLOR = "#3b3b3b"  # chunks homed on a worker that left
TIER_COLORS = {"device": "#1f77b4", "host": "#ff7f0e", "disk": "#2ca02c"}

#: an allocation younger than this (seconds) is still settling: the temporaries of a loop
#: come and go within it. The GVAT table counts such allocations in one line instead of
#: a row each, the memory bars stack them as one key, and the chunk map does not choose
#: one by itself.
SETTLE_SECONDS = 2.0

# Widths of text as the browser draws it, a little generous so that nothing is cut: a
# table cell or header (12px sans-serif), an axis tick label (11px), a plot title (bold
# 13px). Measured in Chromium: 6.4-6.9 px a character in cells, 7.8 in titles.
CELL_CHAR_PX, CELL_PAD_PX = 7.5, 16
TICK_CHAR_PX = 7.0
TITLE_CHAR_PX = 8.6


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


def noun(n: int, word: str, words: str | None = None) -> str:
    """``word`` for one, else its plural (``words``, where it is not ``word`` + "s")."""
    return word if n == 1 else (words or word + "s")


def plural(n: int, word: str, words: str | None = None) -> str:
    """"1 worker", "3 workers"."""
    return f"{n} {noun(n, word, words)}"


def settled(a: dict, now: float) -> bool:
    """Whether allocation row ``a`` has lived ``SETTLE_SECONDS`` at time ``now``."""
    return now - a["created"] >= SETTLE_SECONDS


def text_px(text: str, char_px: float = CELL_CHAR_PX) -> int:
    return int(len(text) * char_px + 0.5)


def fit_columns(table: DataTable, data: dict) -> None:
    """Size each column of ``table`` to its longest text, title or cell (changed only
    when that changes: a new width redraws the table)."""
    for col in table.columns:
        longest = max([col.title, *(str(v) for v in data.get(col.field, ()))], key=len)
        width = text_px(longest) + CELL_PAD_PX
        if col.width != width:
            col.width = width


def table_height(rows: int, most: int = 400) -> int:
    """Height of a table showing ``rows`` rows (header included), at most ``most``."""
    return min(most, 32 + 26 * max(rows, 1))


def redraw_on_new_data(table: DataTable) -> None:
    """Make ``table`` redraw whenever its source's data is replaced. Bokeh 3.9's table
    redraws when its view's row indices change, so new values in as many rows stayed
    unseen (bokeh/bokeh#15328) while plots of the same source showed them: the Devices
    table's load lagged the "Queued work" bars fed by the very same data."""
    table.source.js_on_change("data", CustomJS(args={"view": table.view}, code="""
if (view.indices.size === cb_obj.get_length()) {
  view.change.emit()  // same row count: the view will not say so; else it does itself
}
"""))
