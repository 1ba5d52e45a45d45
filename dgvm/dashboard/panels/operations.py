"""dgvm's operations as they run, in the style of Dask's task stream: one row per worker,
a bar per task from its start to its stop on the worker, coloured by operation (``add``,
``sum``, ``launch-axpy``; the legend names them); a task that failed is black, outlined
in red (the legend's "error").

Since the direct plane sends dgvm's tasks to the workers itself, Dask's task stream no
longer shows them. The bars come from the shared ``Operations`` of the scheduler's
dashboard source (the workers' log of their tasks), and each page streams only the rows it
has not drawn, keeping the last ``operations.MAXLEN`` (1000).
"""

from __future__ import annotations

from bokeh.layouts import column
from bokeh.models import (
    ColumnDataSource, DatetimeTickFormatter, Div, FactorRange, HoverTool, PanTool, ResetTool,
    WheelZoomTool,
)
from bokeh.palettes import Category20
from bokeh.plotting import figure
from dask.utils import format_time
from distributed.utils import color_of

from dgvm.dashboard.panels.common import plural, short

COLUMNS = ("key", "name", "worker", "address", "left", "right", "duration", "chunks", "status",
           "color", "line", "label")
ERROR_FILL, ERROR_LINE = "black", "#d62728"
#: operation colours: Category20 without its reds, which mark errors
PALETTE = tuple(c for c in Category20[20] if c not in ("#d62728", "#ff9896"))
# pixels: a row per worker, a legend entry per operation, and the title, toolbar, axis
# and margins
ROW_PX, LEGEND_ROW_PX, CHROME_PX = 28, 21, 110
#: ms: tasks that start this long after the last one drawn stopped are drawn alone (the
#: plot spans the tasks it draws: a burst after a pause would be a sliver beside the
#: last one), as Dask's task stream clears after 20 s without tasks
CLEAR_AFTER_MS = 20_000


def operation_color(name: str) -> str:
    """The same colour for an operation's name on every page and every refresh."""
    return color_of(name, palette=PALETTE)


def bars(rows: list[dict]) -> dict:
    """The columns of the bars of ``rows`` (``Operations`` rows), times in ms."""
    data = {c: [] for c in COLUMNS}
    for r in rows:
        error = r["status"] != "finished"
        color = operation_color(r["name"])
        values = (r["key"], r["name"], short(r["worker"]), r["worker"], r["start"] * 1000,
                  r["stop"] * 1000, format_time(r["duration"]), r["chunks"], r["status"],
                  ERROR_FILL if error else color, ERROR_LINE if error else color,
                  "error" if error else r["name"])
        for c, v in zip(COLUMNS, values):
            data[c].append(v)
    return data


class OperationsPanel:
    def __init__(self, operations, height: int = 240, **kwargs):
        self.operations = operations  # operations.Operations, shared by the pages
        self._seen = 0  # its rows streamed to the browser
        self._min_height = height
        self._grow = kwargs.get("sizing_mode") != "stretch_both"  # else the window's height
        self._labels: set[str] = set()  # the legend's entries drawn
        self._last_stop: float | None = None  # ms: when the last task drawn stopped
        self._drawn = 0  # bars drawn now
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name="dgvm-operations")
        self.summary = Div(text="", name="dgvm-operations-summary")
        fig = figure_of(height, **kwargs)
        drawn = fig.hbar(y="worker", left="left", right="right", height=0.7, fill_color="color",
                         line_color="line", line_width=2, legend_field="label", source=self.source)
        drawn.nonselection_glyph = None
        fig.legend.label_text_font_size = "8pt"
        fig.add_layout(fig.legend[0], "right")
        fig.add_tools(HoverTool(renderers=[drawn], point_policy="follow_mouse", tooltips=[
            ("operation", "@name"), ("key", "@key"), ("worker", "@address"),
            ("duration", "@duration"), ("chunks", "@chunks"), ("status", "@status"),
        ]))
        self.figure = fig
        self.root = column(self.summary, fig, **kwargs)

    def update(self, snap=None) -> None:
        ops = self.operations
        ops.sync()
        new = ops.since(self._seen)
        self._seen = ops.added
        if new:
            self._draw(bars(new), ops.rows.maxlen)
        errors = sum(n for s, n in ops.statuses.items() if s != "finished")
        text = (f"<b>operations</b> {sum(ops.statuses.values())} · <b>errors</b> {errors} · "
                f"drawn: {plural(self._drawn, 'task')}")
        if self.summary.text != text:
            self.summary.text = text

    def _draw(self, data: dict, most: int) -> None:
        """Add the bars ``data`` (alone after a pause), keeping the last ``most``."""
        pause = self._last_stop is not None and min(data["left"]) - self._last_stop > CLEAR_AFTER_MS
        self._last_stop = max(self._last_stop or 0.0, *data["right"])
        if pause:
            self._labels, self._drawn = set(), 0
        factors = [] if pause else list(self.figure.y_range.factors)
        if pause or set(data["worker"]) - set(factors):  # the first worker at the top
            factors = sorted({*factors, *data["worker"]}, reverse=True)
            self.figure.y_range.factors = factors
        self._labels.update(data["label"])
        if self._grow:  # as tall as the rows and the legend need
            height = max(self._min_height, CHROME_PX + ROW_PX * len(factors),
                         CHROME_PX + LEGEND_ROW_PX * len(self._labels))
            if self.figure.height != height:
                self.figure.height = height
        if pause:
            self.source.data = data
        else:
            self.source.stream(data, rollover=most)
        self._drawn = min(most, self._drawn + len(data["key"]))


def figure_of(height: int, **kwargs):
    """A datetime axis of wall-clock time, a row per worker, and panning and zooming
    along time only, as Dask's task stream."""
    fig = figure(
        name="dgvm-operations-plot", title="dgvm operations: tasks per worker, start to stop", x_axis_type="datetime",
        y_range=FactorRange(), height=height, toolbar_location="above", tools="", **kwargs,
    )
    fig.add_tools(PanTool(dimensions="width"), WheelZoomTool(dimensions="width"), ResetTool())
    fig.xaxis.formatter = DatetimeTickFormatter(
        milliseconds="%H:%M:%S.%3N", seconds="%H:%M:%S", minsec="%H:%M:%S", minutes="%H:%M",
        hourmin="%H:%M", hours="%H:%M", context=None)
    fig.xgrid.visible = False
    return fig
