"""The ``dgvm`` command: ``scheduler``, ``worker``, ``config``, ``info`` and ``demo``."""

from dgvm.cli.commands import main

__all__ = ["main"]
