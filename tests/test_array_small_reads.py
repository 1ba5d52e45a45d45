"""Reading a few elements (dgvm.array._engine.small_reads): x[i, j] and small views are read
straight from the chunks, with NumPy's values, and compute nothing."""

from __future__ import annotations

import numpy as np

import dgvm.array as dnp


def test_elements_and_small_views_are_read_in_place(case):
    h = np.arange(7 * 9 * 5, dtype=np.float32).reshape(7, 9, 5)
    x = dnp.asarray(h, chunks=(3, 4, 2))  # edge blocks of other shapes on every axis
    before = case.allocations()
    for i, j, k in [(0, 0, 0), (6, 8, 4), (3, 4, 1), (-1, -2, -3)]:
        assert float(x[i, j, k]) == float(h[i, j, k])
    for key in [(slice(1, 6, 2), 3), (Ellipsis, 1), (2, None, slice(1, 3)),
                (slice(None, None, -1), slice(2, 7), slice(None, None, 2))]:
        np.testing.assert_array_equal(dnp.asnumpy(x[key]), h[key])
    t = dnp.permute_dims(x, (2, 0, 1))[1:3, 2]
    np.testing.assert_array_equal(dnp.asnumpy(t), np.transpose(h, (2, 0, 1))[1:3, 2])
    assert case.allocations() == before  # read from x's chunks: nothing computed
    row = x[3]
    x[3, 0, 0] = -1.0  # a view shows its base's memory, as in NumPy
    h[3, 0, 0] = -1.0
    assert float(row[0, 0]) == -1.0 and float(x[3, 0, 0]) == -1.0
    # Small trees over views are evaluated on the caller from the leaves' elements.
    before = case.allocations()
    assert bool(x[2, 3, 1] == h[2, 3, 1]) and not bool(x[2, 3, 1] > 1e9)
    np.testing.assert_allclose(dnp.asnumpy(dnp.sqrt(x[1, :4] + x[2, :4, ::-1]) * 2),
                               np.sqrt(h[1, :4] + h[2, :4, ::-1]) * 2, rtol=1e-6)
    assert case.allocations() == before
    y = x * 2  # a view of a deferred result is computed, as before
    assert float(y[1, 1, 1]) == 2 * h[1, 1, 1]


def test_two_views_of_one_array_are_read_in_one_request(case, monkeypatch):
    from dgvm.client.allocation import AllocationHandle

    h = np.arange(8 * 6, dtype=np.float64).reshape(8, 6)
    x = dnp.asarray(h, chunks=(4, 3))
    x.wait()
    gets = []
    real_get = AllocationHandle.get
    monkeypatch.setattr(AllocationHandle, "get", lambda self, pieces: gets.append(pieces) or real_get(self, pieces))
    assert float(x[3, 4] * x[3, 5]) == h[3, 4] * h[3, 5]
    np.testing.assert_array_equal(dnp.asnumpy(x[3] - x[2, ::-1]), h[3] - h[2, ::-1])
    assert len(gets) == 2  # one per read, each covering both views
