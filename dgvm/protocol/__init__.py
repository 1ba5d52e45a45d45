"""What crosses process boundaries: typed ids and records (``records``), the error
hierarchy (``errors``), the chunk grid every side agrees on (``chunk_grid``), and the
messages with their one codec (``messages``). Imports no other dgvm module."""
