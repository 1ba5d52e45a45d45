"""A worker's side: the chunk-store plugin (``dgvm.worker.plugin``), the store, chunk
access for tasks, and the bodies of the tasks that run there.

``dask worker ... --preload dgvm.worker`` installs it: this package is the preload.
"""

from dgvm.worker.plugin import dask_setup, dask_teardown

__all__ = ["dask_setup", "dask_teardown"]
