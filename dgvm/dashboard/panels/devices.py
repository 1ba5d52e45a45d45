"""Device profiles and load: one table row per worker (device, capacity, use, measured
bandwidth, relative speed, SMs, queued work), and bars of speed and load."""

from __future__ import annotations

from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, DataTable, FactorRange, HoverTool, TableColumn
from bokeh.plotting import figure

from dgvm.dashboard.panels.common import fmt_bytes, set_data, short, worker_colors

FIELDS = {
    "worker": "worker", "device": "device", "name": "name", "capacity": "capacity",
    "used": "dgvm", "other": "other", "free": "free", "chunks": "chunks",
    "bandwidth": "bandwidth", "speed": "speed", "sm_count": "SMs", "load": "load (s)",
    "status": "status",
}


class DevicesPanel:
    def __init__(self, height: int = 200, **kwargs):
        self.source = ColumnDataSource({k: [] for k in FIELDS} | {"color": []}, name="dgvm-workers")
        self.table = table = DataTable(
            source=self.source, height=height, index_position=None,
            columns=[TableColumn(field=k, title=t, width=150 if k in ("worker", "name") else 70)
                     for k, t in FIELDS.items()],
            **kwargs,
        )
        self.figures = []
        for field, title in (("speed", "Relative speed (placement)"), ("load", "Queued work (s)")):
            fig = figure(title=title, y_range=FactorRange(), height=height, width=300,
                         tools="", toolbar_location=None)
            bars = fig.hbar(y="worker", right=field, height=0.7, color="color", source=self.source)
            fig.add_tools(HoverTool(renderers=[bars], tooltips=[("worker", "@worker"), (title, f"@{field}")]))
            fig.x_range.start = 0
            self.figures.append(fig)
        self.root = column(table, row(*self.figures), **kwargs)

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
        for fig in self.figures:
            if list(fig.y_range.factors) != factors:
                fig.y_range.factors = factors
        height = 40 + 26 * len(workers)
        if self.table.height != min(height, 400):
            self.table.height = min(height, 400)
        set_data(self.source, data)
