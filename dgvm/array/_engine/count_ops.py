"""The blockwise op of ``bincount``: one row of counts per block of the input.

Row ``b`` of the result (placed beside block ``b`` of ``x``) is NumPy's ``bincount`` of
that block, weighted by the same elements of the weights when there are some (read
through the migration layer where their chunks lie elsewhere). The rows are then summed
as any reduction is (``statistical.sum``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class BinCounts:
    """Blockwise: row ``lo[0]`` is the bincount of that block of input 0 (1-d, values in
    ``[0, length)``), weighted by input 1 when ``weighted``."""

    starts: np.ndarray  # block starts of x
    length: int
    weighted: bool
    dtype: object  # of the result: int64, or float64 with weights

    def block(self, read, lo, hi, xp):
        b = lo[0]
        at, end = [int(self.starts[b])], [int(self.starts[b + 1])]
        x = read(0, at, end)
        if x.dtype == np.bool_:
            x = x.astype(np.int64)
        w = read(1, at, end).astype(np.float64) if self.weighted else None
        counts = xp.bincount(x, weights=w, minlength=self.length)
        return counts[lo[1]:hi[1]].astype(self.dtype).reshape(1, -1)
