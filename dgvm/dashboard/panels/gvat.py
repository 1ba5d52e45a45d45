"""The GVAT as a table: one row per allocation."""

from __future__ import annotations

from bokeh.models import ColumnDataSource, DataTable, TableColumn

from dgvm.dashboard.panels.common import fmt_bytes, layout_label, set_data, short

FIELDS = {
    "alloc_id": "id", "owner": "owner", "size": "size", "layout": "shape / dtype",
    "nchunks": "chunks", "placement": "placement", "spans": "workers", "replicas": "replicas",
}


def _row(a: dict) -> dict:
    return {
        "alloc_id": a["alloc_id"],
        "owner": a["owner"],
        "size": fmt_bytes(a["nbytes"]),
        "layout": layout_label(a),
        "nchunks": f"{a['nchunks']} × {fmt_bytes(a['chunk_bytes'])}",
        "placement": a["placement"],
        "spans": f"{len(a['workers'])}: " + ", ".join(short(w) for w in a["workers"]),
        "replicas": a["replicas"],
    }


class GVATPanel:
    def __init__(self, height: int = 300, **kwargs):
        self.source = ColumnDataSource({k: [] for k in FIELDS}, name="dgvm-gvat")
        self._seen = None
        widths = {"alloc_id": 40, "owner": 160, "spans": 260}
        self.root = DataTable(
            source=self.source, height=height, index_position=None,
            columns=[TableColumn(field=k, title=t, width=widths.get(k, 90)) for k, t in FIELDS.items()],
            **kwargs,
        )

    def update(self, snap) -> None:
        seen = [(a["alloc_id"], tuple(a["workers"]), a["replicas"]) for a in snap.allocations]
        if seen == self._seen:
            return
        self._seen = seen
        rows = [_row(a) for a in snap.allocations]
        set_data(self.source, {k: [r[k] for r in rows] for k in FIELDS})
