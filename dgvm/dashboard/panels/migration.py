"""Data moving between workers: bytes/s per transfer path over time, the hit rate of
kernel reads, and the totals (hits, misses, re-homes, evictions, bytes per path).

It streams the rows of the shared rate history (``DashboardSource.rates``, made once per
point for every open page), so every page shows the same curves and sends only new points."""

from __future__ import annotations

from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource, DataRange1d, DatetimeTickFormatter, Div, LinearAxis, NumeralTickFormatter,
)
from bokeh.palettes import Category10
from bokeh.plotting import figure

from dgvm import transfer
from dgvm.dashboard.panels.common import fmt_bytes, plural

PATHS = transfer.NAMES
COLUMNS = ("time", *PATHS, "hit_rate", "rehomes")


class MigrationPanel:
    def __init__(self, rates, refresh: float = 1.0, height: int = 240, **kwargs):
        self.rates = rates  # counters.Rates
        self._seen = 0  # rows of it streamed to the browser
        bar_ms = 800 * refresh
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name="dgvm-migration")
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
        new = self.rates.since(self._seen)
        if new:
            self.source.stream({c: [r[c] for r in new] for c in COLUMNS},
                               rollover=self.rates.rows.maxlen)
            self._seen = self.rates.added
        t = snap.totals
        reads = t["hits"] + t["misses"]
        rate = f"{t['hits'] / reads:.1%}" if reads else "–"
        moved = ", ".join(
            f"{p} {fmt_bytes(v['bytes'])} in {plural(v['count'], 'chunk')}" for p, v in t["paths"].items() if v["count"]
        ) or "nothing yet"
        text = (f"<b>hits</b> {t['hits']} · <b>misses</b> {t['misses']} · <b>hit rate</b> {rate} · "
                f"<b>re-homes</b> {t['rehomes']} · <b>evicted</b> {t['evicted']} · "
                f"<b>transient reads</b> {t['transient']} · <b>gathered regions</b> {t.get('gathered', 0)} · "
                f"<b>pieces asked ahead</b> {t.get('ahead', 0)} · <b>pieces pushed</b> {t.get('pushed', 0)} · "
                f"<b>moved</b> {moved}")
        if self.totals.text != text:
            self.totals.text = text
