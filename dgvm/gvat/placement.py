"""Placement policies: which worker becomes the home of each chunk of a new allocation.

A policy sees the chunk sizes and one ``Candidate`` per live worker (how many more bytes
it may take, its effective bandwidth, the work already queued on it) and returns, for each
chunk, the position of its worker in the candidate list. Policies are chosen by name;
adding one is a new class registered in ``POLICIES``.
"""

from __future__ import annotations

import abc
import heapq
from dataclasses import dataclass

import numpy as np


class NoFit(Exception):
    """The chunks do not fit in the candidates' limits."""


@dataclass(frozen=True)
class Candidate:
    uid: int
    limit: int  # bytes this worker may still take (free minus headroom)
    bandwidth: float  # bytes/s placement assumes for it
    load: float = 0.0  # seconds of work already queued on it


class PlacementPolicy(abc.ABC):
    name = ""

    @abc.abstractmethod
    def place(self, sizes: np.ndarray, cands: list[Candidate]) -> np.ndarray:
        """Return an int array: candidate position of each chunk. Raise NoFit if full."""


def _contiguous(counts: list[int], n: int) -> np.ndarray:
    """Chunks 0..n-1 in runs: the first counts[0] to candidate 0, and so on."""
    return np.repeat(np.arange(len(counts), dtype=np.int32), counts)[:n]


def _first_fit(sizes: np.ndarray, cands: list[Candidate], order: list[int]) -> np.ndarray:
    """Chunk by chunk, the first candidate in ``order`` with room; NoFit otherwise."""
    room = [c.limit for c in cands]
    out = np.empty(len(sizes), dtype=np.int32)
    j = 0
    for i, s in enumerate(sizes.tolist()):
        while j < len(order) and room[order[j]] < s:
            j += 1
        if j < len(order):
            k = order[j]
        else:  # past the last: any earlier worker with a gap that fits this chunk
            k = next((k for k in order if room[k] >= s), None)
            if k is None:
                raise NoFit(i)
        room[k] -= s
        out[i] = k
    return out


class Balanced(PlacementPolicy):
    """One pass over the allocation finishes soonest.

    Each chunk goes, in effect, to the worker that would finish it first given the bytes
    it already got, its bandwidth and its queued work, never beyond its limit. Equal
    devices get an even split; a 4x faster device about 4x the chunks. Chunks are laid
    out in contiguous runs per worker so that neighbours in an array stay together.

    Queued work is gone after a while and the layout stays: a worker's load counts for at
    most one pass over the allocation (shared by speed) less one chunk, so it shifts the
    worker's share but never takes all of it while there are chunks for every worker. (With
    no cap, a small array made while one worker still ran a long task would land whole on
    the others, and every later operation on it would run without that device.)
    """

    name = "balanced"

    def place(self, sizes, cands):
        n = len(sizes)
        step = int(sizes.max())
        # Greedy on the largest chunk size: conservative, so the real (smaller or
        # equal) chunk sizes fit too.
        fit = [j for j, c in enumerate(cands) if c.limit >= step]
        one_pass = (n - 1) * step / sum(cands[j].bandwidth for j in fit) if fit else 0.0
        load = [min(c.load, one_pass) for c in cands]
        heap = [(load[j] + step / cands[j].bandwidth, j) for j in fit]
        heapq.heapify(heap)
        counts = [0] * len(cands)
        for _ in range(n):
            if not heap:
                # Tight: try again chunk by chunk with the real sizes, most room first.
                order = sorted(range(len(cands)), key=lambda j: -cands[j].limit)
                return _first_fit(sizes, cands, order)
            t, j = heapq.heappop(heap)
            counts[j] += 1
            c = cands[j]
            if (counts[j] + 1) * step <= c.limit:
                heapq.heappush(heap, (load[j] + (counts[j] + 1) * step / c.bandwidth, j))
        return _contiguous(counts, n)


class Packed(PlacementPolicy):
    """Use as few workers as possible: fill the worker with most room first."""

    name = "packed"

    def place(self, sizes, cands):
        order = sorted(range(len(cands)), key=lambda j: (-cands[j].limit, j))
        return _first_fit(sizes, cands, order)


class RoundRobin(PlacementPolicy):
    """Chunk i on worker i mod n, skipping workers that are full."""

    name = "round_robin"

    def place(self, sizes, cands):
        m = len(cands)
        room = [c.limit for c in cands]
        out = np.empty(len(sizes), dtype=np.int32)
        for i, s in enumerate(sizes.tolist()):
            for k in range(m):
                j = (i + k) % m
                if room[j] >= s:
                    break
            else:
                raise NoFit(i)
            room[j] -= s
            out[i] = j
        return out


POLICIES: dict[str, PlacementPolicy] = {p.name: p for p in (Balanced(), Packed(), RoundRobin())}


def colocate(
    sizes: np.ndarray, cands: list[Candidate], other_homes: list[int | None], fallback: PlacementPolicy
) -> np.ndarray:
    """Chunk i where chunk i of another allocation lives (``other_homes[i]``, a candidate
    position or None); chunks that have no partner or no room there go by ``fallback``."""
    room = [c.limit for c in cands]
    out = np.full(len(sizes), -1, dtype=np.int32)
    for i, s in enumerate(sizes.tolist()):
        j = other_homes[i] if i < len(other_homes) else None
        if j is not None and room[j] >= s:
            room[j] -= s
            out[i] = j
    rest = np.flatnonzero(out < 0)
    if len(rest):
        left = [Candidate(c.uid, room[j], c.bandwidth, c.load) for j, c in enumerate(cands)]
        out[rest] = fallback.place(sizes[rest], left)
    return out
