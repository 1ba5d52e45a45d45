"""Device profiles and load: one table row per worker (device, capacity, use, measured
bandwidth, relative speed, SMs, queued work), and bars of speed and load drawn from the
same data."""

from __future__ import annotations

from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, DataTable, FactorRange, HoverTool, TableColumn
from bokeh.plotting import figure

from dgvm.dashboard.panels.common import (
    TICK_CHAR_PX, TITLE_CHAR_PX, fit_columns, fmt_bytes, redraw_on_new_data, set_data, short, table_height,
    text_px, worker_colors,
)

FIELDS = {
    "worker": "worker", "device": "device", "name": "name", "capacity": "capacity",
    "used": "dgvm", "other": "other", "free": "free", "chunks": "chunks",
    "bandwidth": "bandwidth", "speed": "speed", "sm_count": "SMs", "load": "load (s)",
    "status": "status",
}
BARS = (("speed", "Relative speed (placement)"), ("load", "Queued work (s)"))


def bars_width(title: str, labels: list[str]) -> int:
    """Least width of a bar plot whose frame holds ``title`` beside an axis of ``labels``."""
    axis = text_px(max(labels, key=len, default=""), TICK_CHAR_PX) + 30  # labels, ticks, padding
    return axis + text_px(title, TITLE_CHAR_PX) + 30  # the frame's room to the right


class DevicesPanel:
    def __init__(self, height: int = 200, **kwargs):
        # the table and the bars draw this one source, so they always show the same numbers
        self.source = ColumnDataSource({k: [] for k in FIELDS} | {"color": []}, name="dgvm-workers")
        self.table = DataTable(
            source=self.source, height=table_height(0), index_position=None,
            autosize_mode="none",  # columns as wide as their text (fit_columns), never cut
            columns=[TableColumn(field=k, title=t) for k, t in FIELDS.items()],
            **kwargs,
        )
        redraw_on_new_data(self.table)
        self.figures = []
        for field, title in BARS:
            fig = figure(title=title, y_range=FactorRange(), height=height, width=bars_width(title, []),
                         tools="", toolbar_location=None)
            bars = fig.hbar(y="worker", right=field, height=0.7, color="color", source=self.source)
            fig.add_tools(HoverTool(renderers=[bars], tooltips=[("worker", "@worker"), (title, f"@{field}")]))
            fig.x_range.start = 0
            self.figures.append(fig)
        self.root = column(self.table, row(*self.figures), **kwargs)

    def update(self, snap) -> None:
        workers = sorted(snap.workers, key=lambda w: w["address"])
        colors = worker_colors(w["address"] for w in workers)
        data = {
            "worker": [short(w["address"]) for w in workers],
            "device": [w["device"] for w in workers],
            "name": [w["name"] for w in workers],
            "capacity": [fmt_bytes(w["capacity"]) for w in workers],
            "used": [fmt_bytes(w["used"]) for w in workers],
            "other": [fmt_bytes(w["device_other"]) for w in workers],
            "free": [fmt_bytes(w["free"]) for w in workers],
            "chunks": [w["chunks"] for w in workers],
            "bandwidth": [f"{w['bandwidth'] / 1e9:.1f} GB/s" for w in workers],
            "speed": [round(w["speed"], 2) for w in workers],
            "sm_count": [w["sm_count"] for w in workers],
            "load": [round(w["load"], 3) for w in workers],
            "status": [w["status"] for w in workers],
            "color": [colors[w["address"]] for w in workers],
        }
        factors = data["worker"][::-1]  # in the table's order, top down
        for fig, (_, title) in zip(self.figures, BARS):
            if list(fig.y_range.factors) != factors:
                fig.y_range.factors = factors
                fig.width = bars_width(title, factors)
        fit_columns(self.table, data)
        if self.table.height != table_height(len(workers)):
            self.table.height = table_height(len(workers))
        set_data(self.source, data)
