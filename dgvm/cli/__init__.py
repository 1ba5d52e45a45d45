"""The ``dgvm`` command: ``scheduler``, ``worker``, ``cluster``, ``info`` and ``demo``."""
