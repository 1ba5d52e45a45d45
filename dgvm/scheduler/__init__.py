"""The scheduler's side: the GVAT plugin (``dgvm.scheduler.plugin``) over the pure
bookkeeping of ``dgvm.gvat``.

``dask scheduler --preload dgvm.scheduler`` installs it: this package is the preload.
"""

from dgvm.scheduler.plugin import dask_setup

__all__ = ["dask_setup"]
