"""The GVAT as a table: one row per settled allocation, and one line counting the young
ones (the temporaries of a loop come and go faster than a row could be read)."""

from __future__ import annotations

from bokeh.layouts import column
from bokeh.models import ColumnDataSource, DataTable, Div, TableColumn

from dgvm.dashboard.panels.common import (
    SETTLE_SECONDS, fit_columns, fmt_bytes, layout_label, plural, redraw_on_new_data, set_data, settled,
    short, table_height,
)

FIELDS = {
    "alloc_id": "id", "owner": "owner", "size": "size", "layout": "shape / dtype",
    "nchunks": "chunks", "placement": "placement", "spans": "workers", "replicas": "replicas",
}
#: worker addresses listed at most in a row's "workers" cell (the JSON API has them all)
MAX_LISTED = 4


def spans(workers: list[str]) -> str:
    """"3: a, b, c"; past MAX_LISTED workers, "16: a, b, c, d and 12 more"."""
    names = ", ".join(short(w) for w in workers[:MAX_LISTED])
    more = f" and {len(workers) - MAX_LISTED} more" if len(workers) > MAX_LISTED else ""
    return f"{len(workers)}: {names}{more}"


def _row(a: dict) -> dict:
    return {
        "alloc_id": a["alloc_id"],
        "owner": a["owner"],
        "size": fmt_bytes(a["nbytes"]),
        "layout": layout_label(a),
        "nchunks": f"{a['nchunks']} × {fmt_bytes(a['chunk_bytes'])}",
        "placement": a["placement"],
        "spans": spans(a["workers"]),
        "replicas": a["replicas"],
    }


def young_text(young: list[dict]) -> str:
    if not young:
        return ""
    return (f"Not listed yet: {plural(len(young), 'allocation')} younger than {SETTLE_SECONDS:g} s "
            f"({fmt_bytes(sum(a['nbytes'] for a in young))})")


class GVATPanel:
    def __init__(self, height: int | None = None, **kwargs):
        self.source = ColumnDataSource({k: [] for k in FIELDS}, name="dgvm-gvat")
        self._seen = None
        self._height = height  # fixed, else as tall as its rows
        self.table = DataTable(
            source=self.source, height=height or table_height(0), index_position=None,
            autosize_mode="none",  # columns as wide as their text (fit_columns), never cut
            columns=[TableColumn(field=k, title=t) for k, t in FIELDS.items()],
            **kwargs,
        )
        redraw_on_new_data(self.table)
        self.young = Div(text="", name="dgvm-gvat-young")
        self.root = column(self.table, self.young, **kwargs)

    def update(self, snap) -> None:
        rows, young = [], []
        for a in snap.allocations:
            (rows if settled(a, snap.time) else young).append(a)
        seen = ([(a["alloc_id"], tuple(a["workers"]), a["replicas"]) for a in rows],
                len(young), sum(a["nbytes"] for a in young))
        if seen == self._seen:
            return
        self._seen = seen
        cells = [_row(a) for a in rows]
        data = {k: [r[k] for r in cells] for k in FIELDS}
        fit_columns(self.table, data)
        if self._height is None and self.table.height != table_height(len(cells)):
            self.table.height = table_height(len(cells))
        set_data(self.source, data)
        self.young.text = young_text(young)
