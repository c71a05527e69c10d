import numpy as np
import pytest

from predictor.capacity.inventory import Inventory, Node, homogeneous_inventory
from predictor.policy.decision import Placement
from predictor.sim.cluster import ClusterState, PlanError
from tests.predictor.sim.sim_builders import on


def test_whole_gpu_allocation_and_release_round_trip():
    c = ClusterState(homogeneous_inventory(16))
    gpus = c.gpus_for(on("node-0001", 4), 1000)
    assert gpus.tolist() == [8, 9, 10, 11]
    slots = c.allocate(gpus, 1000, job=7)
    assert c.free_whole_gpus_per_node().tolist() == [8, 4]
    assert c.allocated_milli == 4000
    c.release(gpus, 1000, slots)
    assert c.allocated_milli == 0 and (c.free_milli == 1000).all()
    jobs, offsets, held = c.allocations()
    assert len(jobs) == 0 and offsets.tolist() == [0] and len(held) == 0


def test_explicit_gpu_indices_are_used_and_checked():
    c = ClusterState(homogeneous_inventory(8))
    gpus = c.gpus_for(on("node-0000", 2, indices=(3, 5)), 1000)
    assert gpus.tolist() == [3, 5]
    c.allocate(gpus, 1000, job=0)
    with pytest.raises(PlanError, match="lack"):
        c.gpus_for(on("node-0000", 1, indices=(3,)), 1000)
    with pytest.raises(PlanError, match="do not match"):
        c.gpus_for(on("node-0000", 1, indices=(9,)), 1000)


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (on("nope", 1), "unknown node"),
        (on("node-0000", 9), "8 have it"),
        (Placement("A100-80GB", (("node-0000", 1), ("node-0000", 1)), "nvlink",
                   gpu_indices=(("node-0000", (0,)),)), "same GPU twice"),
    ],
    ids=["unknown-node", "too-many", "twice"],
)
def test_infeasible_plans_are_refused(placement, message):
    with pytest.raises(PlanError, match=message):
        ClusterState(homogeneous_inventory(8)).gpus_for(placement, 1000)


def test_fractional_gpus_share_a_device_up_to_its_capacity():
    c = ClusterState(homogeneous_inventory(8))
    first = c.gpus_for(on("node-0000", 1), 600)
    c.allocate(first, 600, job=0)
    second = c.gpus_for(on("node-0000", 1, indices=(0,)), 400)
    c.allocate(second, 400, job=1)
    assert c.free_milli[0] == 0
    with pytest.raises(PlanError):
        c.allocate(np.array([0]), 1, job=2)
    assert c.free_whole_gpus_per_node().tolist() == [7]
    jobs, offsets, held = c.allocations()
    assert jobs.tolist() == [0, 1] and offsets.tolist() == [0, 1, 2] and held.tolist() == [0, 0]


def test_allocations_in_csr_form_follow_allocations_and_releases():
    c = ClusterState(homogeneous_inventory(16))
    a = c.allocate(np.array([9, 2]), 1000, job=5)
    c.allocate(np.array([4]), 1000, job=1)
    c.allocate(np.array([0, 1]), 500, job=3)
    c.allocate(np.array([0]), 500, job=4)
    c.release(np.array([9, 2]), 1000, a)
    c.allocate(np.array([15, 14, 13]), 1000, job=2)
    jobs, offsets, held = c.allocations()
    assert jobs.tolist() == [1, 2, 3, 4]
    assert [sorted(held[offsets[i]:offsets[i + 1]].tolist()) for i in range(4)] == [[4], [13, 14, 15], [0, 1], [0]]


def test_slot_table_grows_when_shares_outnumber_gpus():
    c = ClusterState(homogeneous_inventory(8))
    for job in range(16):  # two half-GPU jobs on every GPU: 16 slots for 8 GPUs
        c.allocate(np.array([job % 8]), 500, job=job)
    jobs, offsets, held = c.allocations()
    assert jobs.tolist() == list(range(16)) and held.tolist() == [j % 8 for j in range(16)]
    assert (c.free_milli == 0).all()


def test_memory_of_placed_gpus_is_the_smallest():
    inv = Inventory(nodes=(Node("a", "V100", 2), Node("b", "A100-80GB", 2)))
    c = ClusterState(inv)
    assert c.memory_of(np.array([1, 2])) == 16_384
    assert c.memory_of(np.array([3])) == 81_920


def test_could_fit_counts_gpus_with_the_share_free_and_csr_is_cached_until_a_change():
    c = ClusterState(homogeneous_inventory(16))
    c.allocate(c.gpus_for(on("node-0000", 8), 1000), 1000, job=0)
    c.allocate(c.gpus_for(on("node-0001", 7), 500), 500, job=1)  # node-0001: 7 GPUs half free, 1 whole
    assert not c.could_fit(np.array([2]), np.array([1000]))  # one whole GPU free
    assert c.could_fit(np.array([1]), np.array([1000]))
    assert c.could_fit(np.array([8]), np.array([500]))  # 7 halves + the whole one
    assert not c.could_fit(np.array([9, 2]), np.array([500, 1000]))
    assert c.could_fit(np.array([9, 8]), np.array([500, 400]))
    assert not c.could_fit(np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    first = c.allocations()
    assert c.allocations() is first  # nothing changed: the same arrays
    assert not first[0].flags.writeable
    slots = np.flatnonzero(c.slot_job == 1)
    c.release(c.slot_gpu[slots], 500, slots)
    jobs, _, _ = c.allocations()
    assert jobs.tolist() == [0]
