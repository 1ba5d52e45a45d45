"""The cuda backend's chunk buffers: freed ones are reused for the next chunk of the same
size, count as free memory, and go back to the driver when an allocation needs the room."""

from __future__ import annotations

import pytest

MiB = 2**20


@pytest.mark.gpu
def test_freed_chunk_buffers_are_reused_and_given_back_when_needed():
    from dgvm.backends.cuda import CudaBackend

    b = CudaBackend(capacity=None)
    _, free_before = b.device_memory()
    first = b.allocate(64 * MiB)
    b.view(first, 64 * MiB)[:16] = 7
    b.release(first, 64 * MiB)
    assert b.used == 0 and b._cached == 64 * MiB
    _, free_cached = b.device_memory()
    assert free_cached >= free_before - 8 * MiB  # kept, yet free for dgvm's placement
    again = b.allocate(64 * MiB)  # the same buffer, zero-filled as asked
    assert again.ptr == first.ptr and b._cached == 0
    assert int(b.view(again, 64 * MiB)[:16].sum()) == 0
    raw = b.allocate(64 * MiB, zero=False)  # not from the cache (empty): a fresh buffer
    assert raw.ptr != again.ptr
    b.release(again, 64 * MiB)
    b.release(raw, 64 * MiB)
    assert b._cached == 128 * MiB
    # More than the driver has left, but not more than it has plus the kept buffers: the
    # cache goes back to the driver and the allocation succeeds.
    import cupy

    del first, again, raw  # the backend's cache holds the only references now
    for handle in [b.allocate(64 * MiB, zero=False) for _ in range(6)]:
        b.release(handle, 64 * MiB)  # the two kept buffers and four new ones: 384 MiB kept
    del handle
    assert b._cached == 384 * MiB
    cupy.get_default_memory_pool().free_all_blocks()
    driver_free, _ = cupy.cuda.runtime.memGetInfo()
    filler = cupy.cuda.Memory(int(driver_free) - 512 * MiB)  # leave the driver 512 MiB
    try:
        handle = b.allocate(768 * MiB, zero=False)
        assert b._cached == 0 and b.used == 768 * MiB
        b.release(handle, 768 * MiB)
    finally:
        del filler
        b.drop_cache()
