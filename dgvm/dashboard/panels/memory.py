"""Device memory per worker: dgvm's capacity, stacked by allocation, owner or tier, then
read replicas and memory used by others; a dotted outline marks the whole device. The plot
is as tall as its bars and legend need, whatever the window's height."""

from __future__ import annotations

from bokeh.layouts import column
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, NumeralTickFormatter, RadioButtonGroup
from bokeh.plotting import figure

from dgvm.dashboard.panels.common import (
    OTHER_COLOR, REPLICA_COLOR, fmt_bytes, key_color, set_data, settled, worker_label,
)

STACKS = ("allocation", "owner", "tier")
COLUMNS = ("worker", "left", "right", "color", "key", "size", "address")
#: stack keys drawn apart at most (the largest); the rest are drawn together
MAX_KEYS = 12
#: the key of the allocations that have not settled (the temporaries of a loop)
YOUNG = "new allocations"
# pixels: a bar per worker, a legend entry per key, and the title, axis and margins
BAR_PX, LEGEND_ROW_PX, CHROME_PX = 36, 21, 90


def plot_height(nworkers: int, nkeys: int) -> int:
    """As tall as the bars of ``nworkers`` and a legend of ``nkeys`` need."""
    return CHROME_PX + max(BAR_PX * max(nworkers, 1), LEGEND_ROW_PX * nkeys)


def _groups(w: dict, stack: str, young: set[str] = frozenset()) -> dict[str, int]:
    if stack == "allocation":
        groups: dict[str, int] = {}
        for a, b in w["by_allocation"].items():
            k = YOUNG if a in young else f"allocation {a}"
            groups[k] = groups.get(k, 0) + b
        return groups
    if stack == "owner":
        return dict(w["by_owner"])
    return {w["tier"]: w["home_bytes"]} if w["home_bytes"] else {}


def stacks(workers: list[dict], stack: str, young: set[str] = frozenset()) -> tuple[list[dict[str, int]], dict[str, str]]:
    """Per worker {key: bytes}, the allocations of ``young`` (ids as strings) as one key
    and keys beyond the MAX_KEYS largest (over all workers) merged into "other
    <stack>s"; and a colour per key."""
    groups = [_groups(w, stack, young) for w in workers]
    sums: dict[str, int] = {}
    for g in groups:
        for k, b in g.items():
            sums[k] = sums.get(k, 0) + b
    keep = set(sorted(sums, key=sums.get, reverse=True)[:MAX_KEYS])
    if len(sums) > len(keep):
        rest = f"other {stack}s"
        merged = []
        for g in groups:
            m = {k: b for k, b in g.items() if k in keep}
            others = sum(b for k, b in g.items() if k not in keep)
            if others:
                m[rest] = others
            merged.append(m)
        groups = merged
    keys = sorted({k for g in groups for k in g})
    return groups, {k: key_color(k, keys) for k in keys}


class MemoryPanel:
    def __init__(self, **kwargs):
        self.stack_by = RadioButtonGroup(labels=[f"by {s}" for s in STACKS], active=0)
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name="dgvm-memory")
        self.bounds = ColumnDataSource(
            {"worker": [], "capacity": [], "total": [], "size": [], "total_size": []},
            name="dgvm-capacity",
        )
        fig = figure(
            title="Device memory per worker", y_range=FactorRange(), height=plot_height(0, 0),
            tools="", toolbar_location=None, x_axis_label="bytes", **kwargs,
        )
        bars = fig.hbar(
            y="worker", left="left", right="right", height=0.7, color="color",
            legend_field="key", source=self.source,
        )
        fig.hbar(y="worker", left=0, right="total", height=0.84, fill_alpha=0,
                 line_color="#555555", line_dash="dotted", source=self.bounds)
        cap = fig.hbar(y="worker", left=0, right="capacity", height=0.78, fill_alpha=0,
                       line_color="black", line_width=1.5, source=self.bounds)
        fig.add_tools(HoverTool(renderers=[bars], tooltips=[
            ("worker", "@address"), ("", "@key"), ("bytes", "@size"),
        ]))
        fig.add_tools(HoverTool(renderers=[cap], tooltips=[
            ("worker", "@worker"), ("dgvm capacity", "@size"), ("device", "@total_size"),
        ]))
        fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        fig.x_range.start = 0
        fig.legend.label_text_font_size = "8pt"
        fig.add_layout(fig.legend[0], "right")
        self.figure = fig
        self.root = column(self.stack_by, fig, **kwargs)
        self._last = None
        self.stack_by.on_change("active", lambda attr, old, new: self._redraw())

    def update(self, snap) -> None:
        self._last = snap
        self._redraw()

    def _redraw(self) -> None:
        snap = self._last
        if snap is None:
            return
        workers = sorted(snap.workers, key=lambda w: w["address"])
        young = {str(a["alloc_id"]) for a in snap.allocations if not settled(a, snap.time)}
        groups, colors = stacks(workers, STACKS[self.stack_by.active], young)
        data = {c: [] for c in COLUMNS}
        bounds = {"worker": [], "capacity": [], "total": [], "size": [], "total_size": []}
        for w, group in zip(workers, groups):
            label = worker_label(w)
            x = 0
            parts = [(k, b, colors[k]) for k, b in sorted(group.items())]
            parts += [("replicas", w["replica_bytes"], REPLICA_COLOR),
                      ("other use", w["device_other"], OTHER_COLOR)]
            for key, b, color in parts:
                if b <= 0:
                    continue
                for c, v in zip(COLUMNS, (label, x, x + b, color, key, fmt_bytes(b), w["address"])):
                    data[c].append(v)
                x += b
            total = w["device_total"] if w["device_total"] is not None else w["capacity"]
            for c, v in zip(bounds, (label, w["capacity"], total, fmt_bytes(w["capacity"]), fmt_bytes(total))):
                bounds[c].append(v)
        factors = bounds["worker"][::-1]  # the first worker at the top
        if list(self.figure.y_range.factors) != factors:
            self.figure.y_range.factors = factors
        height = plot_height(len(workers), len(set(data["key"])))
        if self.figure.height != height:
            self.figure.height = height
        set_data(self.source, data)
        set_data(self.bounds, bounds)
