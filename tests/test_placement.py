import numpy as np
import pytest

from dgvm.gvat import placement as P

GB = 10**9


def counts(homes, n):
    return np.bincount(homes, minlength=n).tolist()


def cands(*specs):
    return [P.Candidate(uid=i, limit=lim, bandwidth=bw, load=load) for i, (lim, bw, load) in enumerate(specs)]


def test_balanced_even_split_for_equal_devices():
    c = cands((GB, 1.0, 0), (GB, 1.0, 0), (GB, 1.0, 0), (GB, 1.0, 0))
    homes = P.POLICIES["balanced"].place(np.full(100, 1000), c)
    assert counts(homes, 4) == [25, 25, 25, 25]
    # contiguous runs: neighbours stay together
    assert (np.diff(homes) >= 0).all()


def test_balanced_follows_speed_and_queued_load():
    c = cands((GB, 1.0, 0), (GB, 4.0, 0))
    assert counts(P.POLICIES["balanced"].place(np.full(100, 10), c), 2) == [20, 80]
    # worker 1 already has 100 s of work queued: it counts as one pass over the new
    # chunks less one ((50 - 1) / (1 + 4) = 9.8 s), so worker 0 takes more than its
    # share, not all
    c = cands((GB, 1.0, 0), (GB, 4.0, 100.0))
    homes = P.POLICIES["balanced"].place(np.full(50, 1), c)
    assert counts(homes, 2) == [18, 32]  # 18 s on worker 0, 9.8 + 32 / 4 = 17.8 s on worker 1


@pytest.mark.parametrize("n, load, expected", [
    (16, 0.5, [8, 8]), (16, 2.0, [9, 7]), (16, 8.0, [12, 4]), (16, 1e6, [12, 4]),
    (2, 1e6, [1, 1]), (3, 1e6, [1, 1, 1]),
])
def test_queued_load_shifts_a_share_but_never_takes_all_of_it(n, load, expected):
    """A layout outlives the queue: however much work waits on the last worker, it keeps a
    share of a new allocation of at least a chunk per worker (a pass over 16 chunks takes
    8 s on two workers)."""
    c = cands(*[(GB, 1.0, 0)] * (len(expected) - 1), (GB, 1.0, load))
    assert counts(P.POLICIES["balanced"].place(np.full(n, 1), c), len(expected)) == expected


def test_balanced_never_exceeds_limits():
    c = cands((300, 1.0, 0), (10_000, 1.0, 0))
    homes = P.POLICIES["balanced"].place(np.full(20, 100), c)
    assert counts(homes, 2) == [3, 17]


def test_balanced_tight_fit_uses_real_sizes():
    # The last chunk is small; only chunk-by-chunk first fit finds room for it.
    c = cands((250, 1.0, 0), (250, 1.0, 0))
    sizes = np.array([200, 200, 50, 50])
    homes = P.POLICIES["balanced"].place(sizes, c)
    used = np.bincount(homes, weights=sizes, minlength=2)
    assert (used <= 250).all() and used.sum() == 500


def test_packed_uses_fewest_workers():
    c = cands((500, 1.0, 0), (2000, 1.0, 0), (1000, 1.0, 0))
    homes = P.POLICIES["packed"].place(np.full(25, 100), c)
    assert counts(homes, 3) == [0, 20, 5]  # most room first


def test_round_robin_skips_full_workers():
    c = cands((200, 1.0, 0), (10_000, 1.0, 0))
    homes = P.POLICIES["round_robin"].place(np.full(6, 100), c)
    assert homes.tolist() == [0, 1, 0, 1, 1, 1]


def test_colocate_follows_partner_then_falls_back():
    c = cands((300, 1.0, 0), (10_000, 1.0, 0))
    partner = [0, 0, 0, 0, 1]
    homes = P.colocate(np.full(6, 100), c, partner, P.POLICIES["balanced"])
    assert homes[:3].tolist() == [0, 0, 0]  # worker 0 full after three
    assert homes[3:].tolist() == [1, 1, 1]


@pytest.mark.parametrize("name", ["balanced", "packed", "round_robin"])
def test_no_fit_raises(name):
    c = cands((100, 1.0, 0), (100, 1.0, 0))
    with pytest.raises(P.NoFit):
        P.POLICIES[name].place(np.full(3, 100), c)
