"""``dgvm.blocks``: a launch argument made of chosen blocks of an array.

A plain DArray argument arrives as the block with the output block's index. When an
output block needs other blocks (a matrix product needs a row panel of A and a column
panel of B), ``dgvm.blocks(x, select)`` says which: ``select(block)`` gets the output
block's index (a tuple) and returns, per axis of ``x``, a block index or a slice of block
indices. The blocks arrive as one array; those homed elsewhere are fetched like any miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dgvm.array import DArray


@dataclass(frozen=True)
class Blocks:
    array: DArray
    select: Callable[[tuple], tuple]


def blocks(x, select: Callable[[tuple], tuple]) -> Blocks:
    """Pass blocks ``select(out_block)`` of ``x`` to a kernel (see the module docstring).

    >>> dgvm.launch(matmul, dgvm.blocks(a, lambda b: (b[0], slice(None))),
    ...             dgvm.blocks(b, lambda b: (slice(None), b[1])), out=c)
    """
    if not isinstance(x, DArray):
        raise TypeError(f"dgvm.blocks needs a DArray, got {type(x).__name__}")
    if not callable(select):
        raise TypeError(f"select must map an output block index to block selections, got {select!r}")
    return Blocks(x, select)

