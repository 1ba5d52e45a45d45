import pytest

from dgvm.gvat.ranges import RangeAllocator


def test_ranges_are_aligned_disjoint_and_reused():
    r = RangeAllocator(base=4096, limit=1 << 20, alignment=4096)
    a = r.allocate(100)
    b = r.allocate(5000)
    c = r.allocate(4096)
    assert (a, b, c) == (4096, 8192, 16384)
    assert r.used_total == 4096 + 8192 + 4096
    r.free(b)
    assert r.allocate(8192) == b  # the hole is reused
    r.free(a)
    r.free(b)
    r.free(c)
    assert r.used_total == 0
    # all holes coalesced back into one: the whole range fits again
    assert r.allocate(1 << 20) == 4096


def test_ranges_exhaustion_and_errors():
    r = RangeAllocator(base=1, limit=10)
    assert r.allocate(10) == 1
    assert r.allocate(1) is None
    with pytest.raises(KeyError):
        r.free(5)
    with pytest.raises(ValueError):
        r.allocate(0)
    with pytest.raises(ValueError):
        RangeAllocator(base=0, limit=10)
