"""``GangMemo`` answers every search as ``find_gang`` does, however often and in whatever order asked."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.capacity.inventory import homogeneous_inventory
from predictor.capacity.layout import ClusterLayout
from predictor.capacity.placement import GangMemo, find_gang

LAY = ClusterLayout.of(homogeneous_inventory(32, nodes_per_rack=2))

queries = st.lists(
    st.tuples(st.lists(st.booleans(), min_size=32, max_size=32), st.sampled_from([1, 1, 2, 3, 4, 8, 12]),
              st.integers(0, 4), st.sampled_from(["best_class", "first_fit"]),
              st.one_of(st.none(), st.lists(st.integers(1, 1000), min_size=32, max_size=32))),
    min_size=1, max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(queries=queries)
def test_memo_answers_as_find_gang(queries):
    memo = GangMemo(LAY, max_entries=64)
    for _ in range(2):  # every query twice: the second round reads the memo
        for usable, g, max_class, strategy, free in queries:
            usable = np.array(usable)
            free = None if free is None else np.array(free, dtype=np.int64)
            got = memo.find(usable, g, max_class=max_class, strategy=strategy, free_milli=free)
            want = find_gang(LAY, usable, g, max_class=max_class, strategy=strategy, free_milli=free)
            assert (got is None) == (want is None)
            if want is not None:
                assert got.gpus.tolist() == want.gpus.tolist()
                assert got.placement_class == want.placement_class
    assert memo.hits > 0


def test_a_single_share_follows_the_free_shares_under_the_same_mask():
    memo = GangMemo(LAY)
    usable = np.zeros(32, dtype=bool)
    usable[[3, 9]] = True
    free = np.full(32, 1000, dtype=np.int64)
    free[3] = 200
    assert memo.find(usable, 1, free_milli=free).gpus.tolist() == [3]  # the fullest GPU that fits
    free[3], free[9] = 1000, 300
    assert memo.find(usable, 1, free_milli=free).gpus.tolist() == [9]


def test_a_full_memo_forgets_and_still_answers():
    memo = GangMemo(LAY, max_entries=2)
    masks = [np.arange(32) >= k for k in range(5)]
    for mask in masks * 2:
        assert memo.find(mask, 4).gpus.tolist() == find_gang(LAY, mask, 4).gpus.tolist()
    assert len(memo._memo) <= 2
