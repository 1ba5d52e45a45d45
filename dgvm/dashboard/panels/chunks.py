"""The chunk map of one allocation: a cell per chunk, coloured by the worker holding its
home, with a mark on chunks that have read replicas elsewhere.

Arrays lay out their blocks as their grid (leading axes folded into rows); buffers fill a
square. The map is recomputed only when the chosen allocation's homes or replicas, or the
live workers, changed.

Which allocation: the one chosen in the selector while it lives, else the one the page's
URL names (``?alloc=3``), else the largest settled allocation (the oldest of equals), so the
temporaries of a loop never take the map over; the selector lists settled allocations.
"""

from __future__ import annotations

import math

import numpy as np
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, Div, HoverTool, Select
from bokeh.plotting import figure

from dgvm.dashboard.panels.common import (
    LOST_COLOR, fmt_bytes, layout_label, noun, plural, set_data, settled, short, worker_colors,
)

#: chunks drawn at most (the rest are counted in the summary)
MAX_CHUNKS = 10_000
COLUMNS = ("x", "y", "index", "block", "worker", "color", "size", "version", "replicas")


def layout(nchunks: int, grid) -> tuple[np.ndarray, np.ndarray]:
    """(column, row) of each chunk."""
    if grid is not None and len(grid) >= 2:
        cols = len(grid[-1])
    else:
        cols = max(1, math.ceil(math.sqrt(nchunks)))
    k = np.arange(nchunks)
    return k % cols, k // cols


def _label(a: dict) -> str:
    what = layout_label(a) if a.get("shape") is not None else f"{fmt_bytes(a['nbytes'])} buffer"
    return f"{a['alloc_id']}: {what}, {plural(a['nchunks'], 'chunk')}"


def largest(rows: list[dict]) -> dict | None:
    """The largest allocation of ``rows``, the oldest of equals."""
    return max(rows, key=lambda a: (a["nbytes"], -a["alloc_id"]), default=None)


class ChunkMapPanel:
    def __init__(self, gvat, alloc_id: int | None = None, height: int = 360, **kwargs):
        self.gvat = gvat
        self.wanted = alloc_id  # asked for in the page's URL (?alloc=3)
        self.select = Select(title="allocation", options=[], value="", width=320)
        self.summary = Div(text="no allocation", name="dgvm-chunk-summary")
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name="dgvm-chunks")
        self.replicas = ColumnDataSource({"x": [], "y": [], "holders": []}, name="dgvm-replicas")
        fig = figure(title="Chunk map", height=height, match_aspect=True, tools="pan,wheel_zoom,reset",
                     toolbar_location="above", **kwargs)
        cells = fig.rect("x", "y", width=0.94, height=0.94, color="color", line_color="white",
                         legend_field="worker", source=self.source)
        fig.scatter("x", "y", marker="circle_dot", size=9, fill_color="white", line_color="black",
                    legend_label="has replicas", source=self.replicas)
        fig.add_tools(HoverTool(renderers=[cells], tooltips=[
            ("chunk", "@index"), ("block", "@block"), ("home", "@worker"), ("bytes", "@size"),
            ("version", "@version"), ("replicas on", "@replicas"),
        ]))
        fig.y_range.flipped = True
        fig.axis.visible = False
        fig.grid.visible = False
        fig.legend.label_text_font_size = "8pt"
        fig.add_layout(fig.legend[0], "right")  # beside the map, never over it
        self.figure = fig
        self.root = column(self.select, self.summary, fig, **kwargs)
        self._key = None
        self._fixed = None  # (alloc id, columns an allocation never changes)
        self._snap = None
        self._chosen = None  # the allocation the user chose in the selector
        self._choosing = False  # while update() sets the selector itself
        self.select.on_change("value", self._on_select)

    def _on_select(self, attr, old, new) -> None:
        if not self._choosing:  # the user's choice, from the browser
            self._chosen = int(new) if new else None
        self._redraw()

    def _choose(self, snap) -> dict | None:
        """The row of the allocation to show (see the module's docstring)."""
        for wanted in (self._chosen, self.wanted):
            row = snap.allocation(wanted) if wanted is not None else None
            if row is not None:
                return row
        return largest([a for a in snap.allocations if settled(a, snap.time)]) or largest(snap.allocations)

    def update(self, snap) -> None:
        self._snap = snap
        shown = self._choose(snap)
        # the selector lists settled allocations, and the one shown
        options = [(str(a["alloc_id"]), _label(a)) for a in snap.allocations
                   if a is shown or settled(a, snap.time)]
        value = str(shown["alloc_id"]) if shown is not None else ""
        self._choosing = True
        try:
            if self.select.options != options:
                self.select.options = options
            if self.select.value != value:
                self.select.value = value  # redraws
        finally:
            self._choosing = False
        self._redraw()

    def _missing(self) -> str:
        """A note when the URL names an allocation the GVAT does not hold."""
        if self.wanted is None or self._snap is None or self._snap.allocation(self.wanted) is not None:
            return ""
        return (f"<br>allocation {self.wanted} (asked in the URL) is not in the GVAT: freed, or "
                "not made yet")

    def _redraw(self) -> None:
        snap = self._snap
        alloc = self.gvat.allocations.get(int(self.select.value)) if self.select.value else None
        row = snap.allocation(alloc.alloc_id) if snap is not None and alloc is not None else None
        if row is None:
            self._key = None
            set_data(self.source, {c: [] for c in COLUMNS})
            set_data(self.replicas, {"x": [], "y": [], "holders": []})
            self.summary.text = "no allocation" + self._missing()
            return
        # What the map shows changes with homes (every move is counted), replicas, the live
        # workers (their colours; a worker that left makes its chunks "lost"), and versions
        # (they only grow: their sum moves with every write). Each is read where the drawing
        # reads it: the allocation's own tables, and the snapshot's workers.
        key = (alloc.alloc_id, alloc.stats["rehomes"], alloc.stats["migrated"],
               sum(len(h) for h in alloc.replicas.values()),
               tuple(w["address"] for w in snap.workers), self._missing())
        versions = int(alloc.versions.sum())
        if self._key is not None and key == self._key[0]:
            if versions != self._key[1]:  # only writes: send the version column alone
                n = len(self.source.data["version"])
                self.source.patch({"version": [(slice(0, n), alloc.versions[:n].tolist())]})
                self._key = (key, versions)
            return
        self._key = (key, versions)
        self._draw(alloc, snap)

    def _fixed_columns(self, alloc, n: int) -> dict:
        """Position, index, block and size of each chunk: fixed for an allocation's life,
        so made once per allocation shown, not at every redraw."""
        if self._fixed is None or self._fixed[0] != alloc.alloc_id:
            x, y = layout(alloc.nchunks, alloc.grid_chunks)
            grid = tuple(len(c) for c in alloc.grid_chunks) if alloc.grid_chunks else None
            blocks = ([str(tuple(int(i) for i in b)) for b in zip(*np.unravel_index(np.arange(n), grid))]
                      if grid else [str(i) for i in range(n)])
            sizes = np.diff(alloc.offsets[: n + 1])
            self._fixed = (alloc.alloc_id, {
                "x": x[:n].tolist(), "y": y[:n].tolist(), "index": list(range(n)), "block": blocks,
                "size": [fmt_bytes(s) for s in sizes.tolist()],
            })
        return self._fixed[1]

    def _draw(self, alloc, snap) -> None:
        inv = self.gvat.inventory
        n = min(alloc.nchunks, MAX_CHUNKS)
        fixed = self._fixed_columns(alloc, n)
        x, y = fixed["x"], fixed["y"]
        homes = alloc.homes[:n]
        uids, inverse = np.unique(homes, return_inverse=True)
        recs = [inv.by_uid[u] for u in uids.tolist()]
        colors = worker_colors(w["address"] for w in snap.workers)
        names = [short(r.address) if r.alive else f"{short(r.address)} (lost)" for r in recs]
        fills = [colors.get(r.address, LOST_COLOR) if r.alive else LOST_COLOR for r in recs]
        holders = {i: ", ".join(sorted(short(inv.by_uid[u].address) for u in h))
                   for i, h in alloc.replicas.items() if h and i < n}
        inv_list = inverse.tolist()
        set_data(self.source, {
            **fixed,
            "worker": [names[h] for h in inv_list], "color": [fills[h] for h in inv_list],
            "version": alloc.versions[:n].tolist(), "replicas": [holders.get(i, "") for i in range(n)],
        })
        marked = sorted(holders)
        set_data(self.replicas, {
            "x": [int(x[i]) for i in marked], "y": [int(y[i]) for i in marked],
            "holders": [holders[i] for i in marked],
        })
        spans = recs if n == alloc.nchunks else [inv.by_uid[u] for u in np.unique(alloc.homes).tolist()]
        live = sum(r.alive for r in spans)
        text = (f"<b>allocation {alloc.alloc_id}</b> of {short(alloc.owner)}: "
                f"<span id='dgvm-nchunks'>{alloc.nchunks}</span> {noun(alloc.nchunks, 'chunk')} on "
                f"<span id='dgvm-nworkers'>{live}</span> {noun(live, 'worker')}")
        if len(spans) > live:
            text += f" ({len(spans) - live} lost)"
        if holders:
            text += f"; {plural(len(holders), 'chunk')} with replicas"
        if alloc.nchunks > n:
            text += f"; the first {n} shown"
        self.summary.text = text + self._missing()
