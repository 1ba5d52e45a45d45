"""Chunks that hold whole lines along one axis, and where to put them.

A sort along an axis cut into several blocks sorts each chunk's lines where it lives,
then regroups those sorted runs so that every chunk holds whole lines (the axis whole,
the other axes cut finer so that no chunk has more elements than the input's largest),
merges them there, and cuts the result back into the input's chunks
(``dgvm.array.sorting``): two passes of data between workers and no split to find. Where one line has more elements than the
input's largest chunk there is no such layout, and the exact merge of ``sort_splits``
runs instead.
"""

from __future__ import annotations

import numpy as np

from dgvm.protocol import chunk_grid


def _halved(blocks: tuple) -> tuple:
    out = []
    for c in blocks:
        out.extend(h for h in (-(-c // 2), c // 2) if h)
    return tuple(out)


def line_chunks(x, axis: int):
    """Chunks of ``x``'s shape with ``axis`` whole and no chunk larger (in elements) than
    ``x``'s largest, each within one block of ``x`` on the other axes; None where a line
    alone is larger."""
    limit = int(chunk_grid.block_nbytes(x.chunks, 1).max())
    if x.shape[axis] > limit:
        return None
    chunks = list(x.chunks)
    chunks[axis] = (x.shape[axis],)
    while int(chunk_grid.block_nbytes(chunks, 1).max()) > limit:
        # Halve the blocks of the other axis whose largest block is longest.
        a = max((b for b in range(x.ndim) if b != axis), key=lambda b: max(chunks[b]))
        chunks[a] = _halved(chunks[a])
    return tuple(chunks)


def line_picks(x, chunks, axis: int) -> list[int]:
    """Per chunk of ``chunks`` (``line_chunks``), the chunk of ``x`` it is placed beside:
    one of the input chunks its lines come from, on the worker given the fewest
    elements so far, so that every worker sorts its share."""
    homes = x.alloc.homes()
    load: dict[str, int] = {}
    starts = [np.cumsum((0,) + c) for c in x.chunks]
    picks = []
    for sl in chunk_grid.block_slices(chunks):
        block = [int(np.searchsorted(st, s.start, side="right")) - 1 for st, s in zip(starts, sl)]
        size = int(np.prod([s.stop - s.start for s in sl]))
        options = []
        for b in range(x.numblocks[axis]):
            block[axis] = b
            options.append(chunk_grid.flat_index(block, x.numblocks))
        best = min(options, key=lambda k: (load.get(homes[k], 0), options.index(k)))
        load[homes[best]] = load.get(homes[best], 0) + size
        picks.append(best)
    return picks

