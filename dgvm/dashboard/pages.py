"""The dashboard's Bokeh pages, in the style of distributed's own.

``/individual-dgvm`` shows every panel inside the dashboard's navigation bar; the small
pages ``/individual-dgvm-memory``, ``-migration``, ``-chunks`` and ``-operations`` hold one
panel each, for docking in JupyterLab's Dask extension. Every session refreshes once per
``dgvm.dashboard.refresh``; sessions share one snapshot per half period.
"""

from __future__ import annotations

import logging
import weakref

from bokeh.layouts import column
from bokeh.models import Div

from dgvm.dashboard import urls
from dgvm.dashboard.panels import (
    ChunkMapPanel, DevicesPanel, GVATPanel, MemoryPanel, MigrationPanel, OperationsPanel,
)
from dgvm.dashboard.source import DashboardSource

logger = logging.getLogger("dgvm.dashboard")

NOT_RUNNING = (
    "<p>dgvm is not running on this scheduler. Start it with "
    "<code>dask scheduler --preload dgvm.scheduler</code>, <code>dgvm.LocalCluster</code> "
    "or <code>dgvm.connect()</code>.</p>"
)


class Page:
    """The panels of one browser session, refreshed together from one snapshot."""

    def __init__(self, source: DashboardSource, panels):
        self.source = source
        self.panels = panels
        self._failed = False

    def update(self, fresh: bool = False) -> None:
        """Show the latest snapshot: a fresh one (``fresh``: a page just opened shows the
        GVAT as it is now), else one shared with the other open pages that is at most
        half a refresh period old."""
        try:
            snap = self.source.snapshot(max_age=0.0 if fresh else self.source.refresh / 2)
            for p in self.panels:
                p.update(snap)
        except Exception:
            if not self._failed:  # once per session, not once per second
                logger.exception("dgvm dashboard update failed")
            self._failed = True


def _start(doc, page: Page) -> None:
    page.update(fresh=True)
    ref = weakref.ref(page)

    def tick():
        p = ref()
        if p is not None:
            p.update()

    doc.add_periodic_callback(tick, int(page.source.refresh * 1000))
    doc.dgvm_page = page  # the session keeps its page (and the page no session)


def _style(doc, title: str, extra: dict | None = None) -> None:
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env  # needs Bokeh (optional)

    doc.title = f"Dask: {title}"
    doc.theme = BOKEH_THEME
    if extra is not None:  # inside the dashboard's navigation bar ("More..." lists us)
        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)


def _source(scheduler, doc) -> DashboardSource | None:
    source = DashboardSource.of(scheduler)
    if source is None:
        doc.add_root(Div(text=NOT_RUNNING))
    return source


def _alloc_arg(doc) -> int | None:
    """``?alloc=3`` in the page's URL chooses the allocation of the chunk map."""
    try:
        value = doc.session_context.request.arguments.get("alloc")
        return int(value[0]) if value else None
    except (AttributeError, ValueError, TypeError):
        return None


def dgvm_doc(scheduler, extra, doc):
    _style(doc, "dgvm", extra)
    source = _source(scheduler, doc)
    if source is None:
        return
    stretch = {"sizing_mode": "stretch_width"}
    memory = MemoryPanel(**stretch)
    chunks = ChunkMapPanel(source.plugin.gvat, _alloc_arg(doc), **stretch)
    gvat = GVATPanel(**stretch)
    migration = MigrationPanel(source.rates, source.refresh, **stretch)
    devices = DevicesPanel(**stretch)
    operations = OperationsPanel(source.operations, **stretch)
    # the tables take the page's width: their columns are as wide as their text
    doc.add_root(column(
        Div(text="<h2>dgvm: device memory, operations, the GVAT and data movement</h2>"),
        memory.root,
        operations.root,
        Div(text="<b>GVAT</b>: one row per allocation"),
        gvat.root,
        chunks.root,
        migration.root,
        Div(text="<b>Devices</b>: profiles and load"),
        devices.root,
        name="dgvm-dashboard", **stretch,
    ))
    _start(doc, Page(source, [memory, operations, chunks, gvat, migration, devices]))


def one_panel_doc(title: str, make):
    """A page function of one panel, ``make(source, doc)``, for docking in JupyterLab."""

    def panel_doc(scheduler, extra, doc):
        _style(doc, title)
        source = _source(scheduler, doc)
        if source is not None:
            panel = make(source, doc)
            doc.add_root(panel.root)
            _start(doc, Page(source, [panel]))

    return panel_doc


#: url -> page function (scheduler, extra, doc), as in distributed.dashboard.scheduler
APPLICATIONS = {
    urls.PAGE: dgvm_doc,
    # bars as tall as the workers need (stretched to a window, three bars were 500 px each)
    urls.MEMORY_PAGE: one_panel_doc(
        "dgvm memory", lambda source, doc: MemoryPanel(sizing_mode="stretch_width")),
    # curves over time fill the window (or the JupyterLab panel) they are docked in
    urls.MIGRATION_PAGE: one_panel_doc(
        "dgvm migration",
        lambda source, doc: MigrationPanel(source.rates, source.refresh, sizing_mode="stretch_both")),
    urls.CHUNKS_PAGE: one_panel_doc(
        "dgvm chunks",
        lambda source, doc: ChunkMapPanel(source.plugin.gvat, _alloc_arg(doc), sizing_mode="stretch_both")),
    # a task stream fills its window, as Dask's
    urls.OPERATIONS_PAGE: one_panel_doc(
        "dgvm operations",
        lambda source, doc: OperationsPanel(source.operations, sizing_mode="stretch_both")),
}


def menu_entry(url: str) -> dict:
    """The "More..." menu entry distributed makes for an individual page."""
    name = " ".join(url.strip("/").split("-")[1:]).title()
    return {"url": url.strip("/"), "name": name}


def add_to_distributed() -> bool:
    """List the pages in distributed's dashboard applications, which a scheduler turns
    into its Bokeh server (and "More..." menu, and JupyterLab's list) when it starts.
    False when distributed's dashboard cannot be imported (no suitable Bokeh)."""
    try:
        from distributed.dashboard import scheduler as dashboard  # needs a suitable Bokeh (optional)
    except ImportError:
        return False
    for url, fn in APPLICATIONS.items():
        dashboard.applications.setdefault(url, fn)
    return True
