import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.capacity.book import CapacityBook, predicted_busy_until
from predictor.capacity.inventory import Inventory, Node
from predictor.capacity.layout import CROSS_RACK, NVLINK, SAME_RACK, ClusterLayout
from predictor.capacity.placement import find_gang

# 6 nodes of 4 GPUs: NVLink pairs, 2 NUMA domains, 3 racks of 2 nodes
INV = Inventory(nodes=tuple(
    Node(f"n{i}", "A100-80GB", 4, nvlink_islands=((0, 1), (2, 3)), numa_of_gpu=(0, 0, 1, 1), rack=f"r{i // 2}")
    for i in range(6)
))
LAY = ClusterLayout.of(INV)


def book(busy=None, free=None, now=0.0) -> CapacityBook:
    busy = np.zeros(LAY.n_gpus) if busy is None else np.asarray(busy, dtype=float)
    free = np.where(busy > now, 0, 1000) if free is None else np.asarray(free)
    return CapacityBook(LAY, now, free, busy)


def brute_earliest(b: CapacityBook, need: int, max_class: int) -> float:
    for t in np.unique(b.busy_until):
        if find_gang(LAY, b.busy_until <= t, need, max_class=max_class) is not None:
            return float(t)
    return np.inf


@settings(max_examples=60, deadline=None)
@given(busy=st.lists(st.sampled_from([0.0, 10.0, 20.0, 35.0, 50.0, 80.0]), min_size=24, max_size=24),
       need=st.integers(1, 10), max_class=st.integers(0, 4))
def test_earliest_by_class_matches_brute_force(busy, need, max_class):
    b = book(busy)
    times = b.earliest_by_class(0, need)
    assert times[max_class] == brute_earliest(b, need, max_class)
    assert all(times[k + 1] <= times[k] for k in range(4))  # a looser class is never later
    found = b.earliest_start(0, need, max_class=max_class)
    if np.isfinite(times[max_class]):
        t, choice = found
        assert choice.placement_class <= max_class and (b.busy_until[choice.gpus] <= t).all()
    else:
        assert found is None


def test_place_now_avoids_gpus_reserved_before_the_job_ends():
    b = book()
    b.reserve(np.arange(0, 4), start_ts=100.0, end_ts=500.0)  # node n0 reserved from t=100
    ends_short = np.full(5, 90.0)
    ends_long = np.full(5, 200.0)
    short = b.place_now(0, 4, 1000, ends_short)
    long = b.place_now(0, 4, 1000, ends_long)
    assert set(LAY.gpu_node[short.gpus].tolist()) == {0}  # best fit: may backfill the reserved node
    assert 0 not in set(LAY.gpu_node[long.gpus].tolist())


def test_place_now_rechecks_reservations_for_the_class_it_lands_in():
    b = book()
    # every node but n5 reserved from t=150; the job takes 100 s on NVLink but 300 s across racks
    b.reserve(np.arange(0, 20), start_ts=150.0, end_ts=400.0)
    ends = np.array([100.0, 110.0, 120.0, 200.0, 300.0])
    choice = b.place_now(0, 2, 1000, ends)
    assert choice.placement_class == NVLINK
    assert (b.reserved_from[choice.gpus] >= ends[NVLINK]).all()
    big = b.place_now(0, 8, 1000, ends)  # would need other nodes, which end after 150: nothing fits
    assert big is None


def test_reserve_refuses_to_double_book():
    b = book()
    b.reserve(np.array([0, 1]), 10.0, 50.0)
    with pytest.raises(RuntimeError, match="double-book"):
        b.reserve(np.array([1, 2]), 20.0, 60.0)
    b.reserve(np.array([1, 2]), 50.0, 60.0)  # back to back is fine


def test_take_and_give_back_keep_free_counts_exact():
    b = book()
    b.take(np.array([0, 1, 2]), 1000, 10.0)
    b.take(np.array([4]), 300, 10.0)
    assert b.whole_free_by_type.tolist() == [20] and b.any_free_by_type.tolist() == [21]
    b.give_back(np.array([0, 4]), np.array([1000, 300]))
    assert b.whole_free_by_type.tolist() == [22] and b.any_free_by_type.tolist() == [22]
    with pytest.raises(RuntimeError):
        b.take(np.array([1]), 1000, 10.0)


def test_predicted_busy_until_uses_p90_ends_and_overrun_extension():
    alloc = np.array([0, 1, 2, 2])
    offsets = np.array([0, 2, 3, 4])
    start = np.array([0.0, 0.0, 0.0])
    end = np.array([500.0, 50.0, np.nan])  # job 1 overran (ends before now=100); job 2 unknown
    busy = predicted_busy_until(6, 100.0, alloc, offsets, start, end, overrun_extension_s=30.0,
                                unknown_duration_s=1000.0)
    assert busy.tolist() == [500.0, 500.0, 1000.0, 100.0, 100.0, 100.0]


def test_overrun_growth_extends_a_job_by_how_far_it_has_outrun_its_prediction():
    alloc, offsets = np.array([0, 1, 2]), np.array([0, 1, 2, 3])
    start = np.zeros(3)
    end = np.array([990.0, 100.0, 2000.0])  # at now=1000: overran by 10 s and by 900 s; one still inside
    kw = dict(overrun_extension_s=60.0, unknown_duration_s=1.0)
    fixed = predicted_busy_until(3, 1000.0, alloc, offsets, start, end, **kw)
    assert fixed.tolist() == [1060.0, 1060.0, 2000.0]
    grown = predicted_busy_until(3, 1000.0, alloc, offsets, start, end, overrun_growth=2.0, **kw)
    assert grown.tolist() == [1060.0, 1000.0 + 2 * 900.0, 2000.0]  # max(60, 2 x overrun)


def test_earliest_start_for_any_class_is_the_gth_free_gpu():
    busy = np.repeat([0.0, 40.0, 10.0, 30.0, 20.0, 60.0], 4)
    b = book(busy)
    t, choice = b.earliest_start(0, 12)
    assert t == 20.0 and choice.placement_class in (SAME_RACK, CROSS_RACK)
    assert b.earliest_start(0, 4, max_class=NVLINK) is None  # islands are pairs
    assert b.earliest_by_class(0, 2)[NVLINK] == 0.0
    assert b.earliest_start(0, 25) is None
    assert b.earliest_by_class(0, 24)[CROSS_RACK] == 60.0


MIXED = ClusterLayout.of(Inventory(nodes=(
    Node("a0", "A100-80GB", 4), Node("a1", "A100-80GB", 4), Node("v0", "V100M32", 8))))


@settings(max_examples=60, deadline=None)
@given(free=st.lists(st.sampled_from([0, 250, 500, 999, 1000]), min_size=16, max_size=16),
       busy=st.lists(st.floats(0, 100), min_size=16, max_size=16),
       bookings=st.lists(st.tuples(st.lists(st.integers(0, 15), min_size=1, max_size=8, unique=True),
                                   st.sampled_from([1, 250, 500, 1000]), st.floats(0, 200)), max_size=6))
def test_small_gangs_are_booked_as_the_array_form_books_them(free, busy, bookings):
    """``take`` books a share on up to eight GPUs element by element; the same bookings through the
    array form (a share per GPU) leave the same free shares, free counts per type, busy times."""
    fast = CapacityBook(MIXED, 0.0, np.array(free), np.array(busy))
    slow = CapacityBook(MIXED, 0.0, np.array(free), np.array(busy))
    for gpus, milli, end in bookings:
        gpus = np.array(gpus)
        if (slow.free_milli[gpus] < milli).any():
            with pytest.raises(RuntimeError, match="over-allocated"):
                fast.take(gpus, milli, end)
            continue
        fast.take(gpus, milli, end)
        slow.take(gpus, np.full(len(gpus), milli), end)  # an array of shares: the array form
        for name in ("free_milli", "whole_free_by_type", "any_free_by_type", "busy_until"):
            np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
        assert fast.version == slow.version
