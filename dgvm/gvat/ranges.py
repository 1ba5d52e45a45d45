"""First-fit allocator of aligned, non-overlapping integer ranges.

Used twice: for the GVAT's 64-bit virtual address space, and for the offsets of chunks
inside a worker's shared-memory arena on the ``cpu`` backend. Freed ranges coalesce with
their neighbours and are reused.
"""

from __future__ import annotations

import bisect


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


class RangeAllocator:
    """Hand out ``[start, start + size)`` ranges from ``[base, base + limit)``.

    Free space is kept as two sorted lists (starts and sizes), so ``allocate`` is a linear
    first-fit scan over free holes (few in practice) and ``free`` is a bisect plus a merge
    with its neighbours.
    """

    def __init__(self, base: int, limit: int, alignment: int = 1):
        if base <= 0 or limit <= 0 or alignment <= 0:
            raise ValueError("base, limit and alignment must be positive")
        self.base = base
        self.limit = limit
        self.alignment = alignment
        self._free_starts = [base]
        self._free_sizes = [limit]
        self._used: dict[int, int] = {}  # start -> size
        self.used_total = 0

    @property
    def free_total(self) -> int:
        return self.limit - self.used_total

    @property
    def holes(self) -> int:
        """How many free pieces there are."""
        return len(self._free_sizes)

    @property
    def largest_hole(self) -> int:
        """The size of the largest free piece (0 when full). O(holes)."""
        return max(self._free_sizes, default=0)

    def __len__(self) -> int:
        return len(self._used)

    def allocate(self, size: int) -> int | None:
        """Return the start of a new range of ``size`` units, or None when none is free."""
        if size <= 0:
            raise ValueError(f"range size must be positive, got {size}")
        size = align_up(size, self.alignment)
        for i, (start, hole) in enumerate(zip(self._free_starts, self._free_sizes)):
            if hole >= size:
                if hole == size:
                    del self._free_starts[i], self._free_sizes[i]
                else:
                    self._free_starts[i] = start + size
                    self._free_sizes[i] = hole - size
                self._used[start] = size
                self.used_total += size
                return start
        return None

    def reserve(self, start: int, size: int) -> bool:
        """Mark ``[start, start + size)`` used (a range handed out before, by an allocator
        whose state was lost: a scheduler that restarted), if it lies inside one free hole;
        False, changing nothing, if any of it is in use."""
        if size <= 0:
            raise ValueError(f"range size must be positive, got {size}")
        size = align_up(size, self.alignment)
        i = bisect.bisect_right(self._free_starts, start) - 1
        if i < 0 or start + size > self._free_starts[i] + self._free_sizes[i]:
            return False
        hole_start, hole_end = self._free_starts[i], self._free_starts[i] + self._free_sizes[i]
        del self._free_starts[i], self._free_sizes[i]
        for piece_start, piece_end in ((start + size, hole_end), (hole_start, start)):
            if piece_end > piece_start:  # (inserted back to front: both at ``i``)
                self._free_starts.insert(i, piece_start)
                self._free_sizes.insert(i, piece_end - piece_start)
        self._used[start] = size
        self.used_total += size
        return True

    def free_below(self, end: int) -> list[tuple[int, int]]:
        """The free pieces (start, size) of ``[base, end)``."""
        out = []
        for start, size in zip(self._free_starts, self._free_sizes):
            if start >= end:
                break
            out.append((start, min(size, end - start)))
        return out

    def size_of(self, start: int) -> int | None:
        return self._used.get(start)

    def free(self, start: int) -> int:
        """Release the range that begins at ``start``; return its size."""
        freed = self._used.pop(start, None)
        if freed is None:
            raise KeyError(start)
        self.used_total -= freed
        size = freed
        i = bisect.bisect_left(self._free_starts, start)
        starts, sizes = self._free_starts, self._free_sizes
        # Merge with the hole after, then with the hole before.
        if i < len(starts) and start + size == starts[i]:
            size += sizes[i]
            del starts[i], sizes[i]
        if i > 0 and starts[i - 1] + sizes[i - 1] == start:
            sizes[i - 1] += size
        else:
            starts.insert(i, start)
            sizes.insert(i, size)
        return freed
