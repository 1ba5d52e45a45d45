"""The URLs of dgvm's dashboard, below the Dask dashboard's prefix (no Bokeh, no server:
the ``dgvm`` command lists them without loading either)."""

from __future__ import annotations

API_VERSION = 1
API_PREFIX = f"dgvm/api/v{API_VERSION}/"
#: the JSON API's resources, each at ``API_PREFIX + name``
API_RESOURCES = ("allocations", "workers", "stats", "operations")

PAGE = "/individual-dgvm"  # every panel
MEMORY_PAGE = "/individual-dgvm-memory"
MIGRATION_PAGE = "/individual-dgvm-migration"
CHUNKS_PAGE = "/individual-dgvm-chunks"
OPERATIONS_PAGE = "/individual-dgvm-operations"
PAGES = (PAGE, MEMORY_PAGE, MIGRATION_PAGE, CHUNKS_PAGE, OPERATIONS_PAGE)
