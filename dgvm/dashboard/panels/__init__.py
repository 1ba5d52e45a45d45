"""Bokeh panels of the dgvm dashboard. Each has a ``root`` (a Bokeh layout) and
``update(snapshot)``, which only reads the snapshot (and, for the chunk map, one
allocation's chunk table; for the operations, the workers' log of their tasks) and sends
data to the browser only when it changed."""

from dgvm.dashboard.panels.chunks import ChunkMapPanel
from dgvm.dashboard.panels.devices import DevicesPanel
from dgvm.dashboard.panels.gvat import GVATPanel
from dgvm.dashboard.panels.memory import MemoryPanel
from dgvm.dashboard.panels.migration import MigrationPanel
from dgvm.dashboard.panels.operations import OperationsPanel

__all__ = ["ChunkMapPanel", "DevicesPanel", "GVATPanel", "MemoryPanel", "MigrationPanel", "OperationsPanel"]
