"""The scheduler side of dgvm: the GVAT, its worker inventory and placement policies."""

from dgvm.gvat.table import GVAT, Allocation

__all__ = ["GVAT", "Allocation"]
