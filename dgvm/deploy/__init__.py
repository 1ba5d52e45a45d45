"""Starting dgvm: the local cluster, the ``dgvm`` command line, the preloads' command
lines for Dask's CLI, the scheduler in a process of its own, and the demo."""
