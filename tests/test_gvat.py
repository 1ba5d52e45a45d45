"""The GVAT's bookkeeping, without a cluster."""

import numpy as np
import pytest

import dgvm
from dgvm.gvat import GVAT
from dgvm.protocol.records import DeviceProfile

MiB = 2**20


def make_gvat(*capacities, headroom=0.1):
    g = GVAT(base=1 << 32, size=1 << 46, alignment=2 * MiB, headroom=headroom)
    for i, cap in enumerate(capacities):
        g.inventory.register(
            f"tcp://w{i}", DeviceProfile("cpu", "cpu", "cpu", capacity=cap, bandwidth=1e10)
        )
    return g


def test_ranges_aligned_disjoint_and_address_zero_invalid():
    g = make_gvat(1024 * MiB, 1024 * MiB)
    allocs = [g.allocate("me", np.full(k + 1, 3 * MiB)) for k in range(5)]
    spans = sorted((a.vaddr, a.vaddr + a.nbytes) for a in allocs)
    assert all(a.vaddr % (2 * MiB) == 0 and a.vaddr > 0 for a in allocs)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    with pytest.raises(dgvm.InvalidAddress):
        g.translate(0)


def test_translate_every_chunk_boundary():
    g = make_gvat(1024 * MiB)
    sizes = np.array([5, 7, 7, 3]) * MiB
    a = g.allocate("me", sizes)
    for k, off in enumerate(a.offsets[:-1].tolist()):
        for delta in (0, 1, sizes[k] - 1):
            loc = g.translate(a.vaddr + off + int(delta))
            assert (loc.chunk_index, loc.offset, loc.alloc_id) == (k, int(delta), a.alloc_id)
    with pytest.raises(dgvm.InvalidAddress):
        g.translate(a.vaddr + a.nbytes)  # one past the end


def test_free_reuses_range_and_rejects_double_free():
    g = make_gvat(1024 * MiB)
    a = g.allocate("me", np.full(4, MiB))
    g.free(a.alloc_id)
    with pytest.raises(dgvm.InvalidAddress, match="already freed"):
        g.free(a.alloc_id)
    with pytest.raises(dgvm.InvalidAddress):
        g.translate(a.vaddr)
    b = g.allocate("me", np.full(4, MiB))
    assert b.vaddr == a.vaddr and b.alloc_id != a.alloc_id
    assert g.inventory.by_address["tcp://w0"].used == 4 * MiB


def test_owner_is_checked():
    g = make_gvat(1024 * MiB)
    a = g.allocate("alice", np.full(2, MiB))
    with pytest.raises(dgvm.AccessDenied, match="alice"):
        g.free(a.alloc_id, owner="bob")


def test_oom_names_the_numbers_and_books_nothing():
    g = make_gvat(100 * MiB, 200 * MiB)
    with pytest.raises(dgvm.OutOfDeviceMemory) as e:
        g.allocate("me", np.full(30, 10 * MiB))
    msg = str(e.value)
    assert "300.00 MiB" in msg and "tcp://w0" in msg and "tcp://w1" in msg and "10%" in msg
    assert isinstance(e.value, MemoryError)
    assert not g.allocations and g.space.used_total == 0
    assert all(r.used == 0 for r in g.inventory.live())


def test_removed_worker_makes_its_chunks_lost_in_O1():
    g = make_gvat(100 * MiB, 100 * MiB)
    a = g.allocate("me", np.full(10, MiB), placement="round_robin")
    g.inventory.remove("tcp://w1")
    tiers = [c.tier for c in g.info(a, with_chunks=True).chunks]
    assert tiers == ["device", "lost"] * 5
    assert g.translate(a.vaddr + MiB).tier == "lost"
    # a new worker at the same address is a new record; the old chunks stay lost
    g.inventory.register("tcp://w1", DeviceProfile("cpu", "cpu", "cpu", 100 * MiB, 1e10))
    assert g.translate(a.vaddr + MiB).tier == "lost"
    g.free(a.alloc_id)


def test_hundred_thousand_chunks():
    g = make_gvat(10**12, 10**12)
    a = g.allocate("me", np.full(100_000, 4096))
    assert a.nchunks == 100_000
    loc = g.translate(a.vaddr + 4096 * 77_777 + 5)
    assert (loc.chunk_index, loc.offset) == (77_777, 5)


def test_translate_with_a_larger_last_chunk():
    g = make_gvat(1024 * MiB)
    a = g.allocate("me", np.array([32, 32, 80]))
    loc = g.translate(a.vaddr + 40)
    assert (loc.chunk_index, loc.offset) == (1, 8)
    many = g.translate_many([a.vaddr + 40, a.vaddr + 64, a.vaddr + 143, a.vaddr])
    assert many.chunk_index == [1, 2, 2, 0] and many.offset == [8, 0, 79, 0]
    with pytest.raises(dgvm.InvalidAddress):
        g.translate_many([a.vaddr, a.vaddr + 144])


def test_reused_arena_memory_is_zeroed():
    from dgvm.backends.cpu import CpuBackend

    b = CpuBackend(capacity=4 * MiB)
    h = b.allocate(MiB)
    b.view(h, MiB)[:] = 7
    b.release(h, MiB)
    h2 = b.allocate(2 * MiB)  # overlaps the dirty range and fresh pages
    assert h2 == h and not b.view(h2, 2 * MiB).any()
    b.close()


def test_the_cpu_arena_counts_whole_aligned_blocks_and_says_so_when_fragmented():
    from dgvm.backends.cpu import CpuBackend

    b = CpuBackend(capacity=256 * 9 + 100)  # 256 reserved, a tail of 100 unusable: 8 blocks
    assert b.capacity == 8 * 256
    small = [b.allocate(1) for _ in range(8)]  # each takes a whole 256-byte block
    assert (b.used, b.padding, b.free) == (8, 8 * 255, 0)
    with pytest.raises(MemoryError, match=r"1 bytes asked \(taking 256\), 0 of 2048 free"):
        b.allocate(1)
    for h in small[::2]:
        b.release(h, 1)
    assert (b.used, b.padding, b.free) == (4, 4 * 255, 4 * 256)
    with pytest.raises(MemoryError, match=r"300 bytes asked, taking 512 in 256-byte blocks; .* "
                                          r"1024 bytes free in 4 pieces, the largest 256"):
        b.allocate(300)  # enough free, no hole that large
    for h in small[1::2]:
        b.release(h, 1)
    assert b.used == b.padding == 0
    b.release(b.allocate(b.capacity), b.capacity)  # all of it, in one piece again
    b.close()


def test_a_replica_counts_only_if_copied_from_the_current_home_and_version():
    # The copy's source buffer may have been released and reused if the chunk moved or
    # was written while a worker copied it: such a replica is refused ("stale").
    g = make_gvat(1024 * MiB, 1024 * MiB)
    a = g.allocate("me", np.full(2, MiB), placement="packed")
    home = g.inventory.by_uid[int(a.homes[0])].address
    other = next(w for w in ("tcp://w0", "tcp://w1") if w != home)
    args = (a.alloc_id, 0, other, MiB, "shm", 0.001)
    assert g.add_replica(*args, source=other, version=0) == "stale"  # not its home
    assert g.add_replica(*args, source=home, version=1) == "stale"  # written meanwhile
    assert not a.replicas.get(0)
    assert g.add_replica(*args, source=home, version=0) == "kept"
    assert a.replicas[0] == {g.inventory.by_address[other].uid}
    g.free(a.alloc_id)
    assert g.add_replica(*args, source=home, version=0) == "gone"
