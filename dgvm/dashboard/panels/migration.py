"""Data moving between workers: bytes/s per transfer path over time, the hit rate of
kernel reads, and the totals (hits, misses, re-homes, evictions, bytes per path).

It reads the shared history of cluster totals (``DashboardSource.history``), so every
open page shows the same curves."""

from __future__ import annotations

import numpy as np
from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource, DataRange1d, DatetimeTickFormatter, Div, LinearAxis, NumeralTickFormatter,
)
from bokeh.palettes import Category10
from bokeh.plotting import figure

from dgvm import transfer
from dgvm.dashboard.panels.common import fmt_bytes, set_data

PATHS = tuple(transfer.PATHS)


def rates(history) -> dict:
    """Columns per interval between history points: time (ms), bytes/s per path, the
    hit rate (NaN with no reads), re-homes."""
    if len(history) < 2:
        return {"time": [], **{p: [] for p in PATHS}, "hit_rate": [], "rehomes": []}
    t = np.array([h[0] for h in history])
    dt = np.maximum(np.diff(t), 1e-9)

    def diff(get):
        return np.diff(np.array([get(h[1]) for h in history], dtype=float))

    out = {"time": (t[1:] * 1000).tolist()}
    for p in PATHS:
        out[p] = (diff(lambda s: s["paths"].get(p, {}).get("bytes", 0)) / dt).tolist()
    hits, misses = diff(lambda s: s["hits"]), diff(lambda s: s["misses"])
    reads = hits + misses
    with np.errstate(invalid="ignore", divide="ignore"):
        out["hit_rate"] = np.where(reads > 0, hits / reads, np.nan).tolist()
    out["rehomes"] = diff(lambda s: s["rehomes"]).tolist()
    return out


class MigrationPanel:
    def __init__(self, history, refresh: float = 1.0, height: int = 240, **kwargs):
        self.history = history
        bar_ms = 800 * refresh
        self.source = ColumnDataSource(rates([]), name="dgvm-migration")
        self.totals = Div(text="", name="dgvm-migration-totals")
        rate = figure(title="Bytes/s between workers, per path", x_axis_type="datetime",
                      height=height, tools="", toolbar_location=None, **kwargs)
        colors = Category10[10]
        for i, p in enumerate(PATHS):
            rate.line("time", p, source=self.source, color=colors[i], line_width=2, legend_label=p)
        rate.yaxis.formatter = NumeralTickFormatter(format="0.0 b")
        rate.legend.location = "top_left"
        rate.legend.label_text_font_size = "8pt"
        hits = figure(title="Hit rate of kernel reads, and re-homes", x_axis_type="datetime",
                      height=height, tools="", toolbar_location=None, y_range=(0, 1.05), **kwargs)
        hits.line("time", "hit_rate", source=self.source, line_width=2, legend_label="hit rate")
        hits.scatter("time", "hit_rate", source=self.source, size=4)
        hits.yaxis.formatter = NumeralTickFormatter(format="0%")
        hits.extra_y_ranges = {"rehomes": DataRange1d(start=0)}
        hits.add_layout(LinearAxis(y_range_name="rehomes", axis_label="re-homes"), "right")
        hits.vbar("time", top="rehomes", width=bar_ms, source=self.source, color="#ff7f0e",
                  alpha=0.6, y_range_name="rehomes", legend_label="re-homes (chunks)")
        hits.legend.location = "bottom_left"
        hits.legend.label_text_font_size = "8pt"
        clock = DatetimeTickFormatter(milliseconds="%H:%M:%S.%3N", seconds="%H:%M:%S",
                                      minsec="%H:%M:%S", minutes="%H:%M", hourmin="%H:%M",
                                      hours="%H:%M", context=None)
        for fig in (rate, hits):
            fig.xaxis.formatter = clock
        self.figures = (rate, hits)
        self.root = column(self.totals, row(rate, hits, **kwargs), **kwargs)

    def update(self, snap) -> None:
        set_data(self.source, rates(list(self.history)))
        t = snap.totals
        reads = t["hits"] + t["misses"]
        rate = f"{t['hits'] / reads:.1%}" if reads else "–"
        moved = ", ".join(
            f"{p} {fmt_bytes(v['bytes'])} in {v['count']} chunks" for p, v in t["paths"].items() if v["count"]
        ) or "nothing yet"
        text = (f"<b>hits</b> {t['hits']} · <b>misses</b> {t['misses']} · <b>hit rate</b> {rate} · "
                f"<b>re-homes</b> {t['rehomes']} · <b>evicted</b> {t['evicted']} · "
                f"<b>transient reads</b> {t['transient']} · <b>moved</b> {moved}")
        if self.totals.text != text:
            self.totals.text = text
