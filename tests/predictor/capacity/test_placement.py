import numpy as np
import pytest

from predictor.capacity.inventory import Inventory, Node, homogeneous_inventory
from predictor.capacity.layout import CROSS_NUMA, CROSS_RACK, NVLINK, SAME_NUMA, SAME_RACK, ClusterLayout
from predictor.capacity.placement import find_gang

LAY = ClusterLayout.of(homogeneous_inventory(64, nodes_per_rack=4))


def usable_except(*busy: int) -> np.ndarray:
    u = np.ones(LAY.n_gpus, dtype=bool)
    u[list(busy)] = False
    return u


@pytest.mark.parametrize(
    "busy, need, klass, nodes",
    [
        ((), 8, NVLINK, {0}),
        (tuple(range(0, 8, 2)), 4, NVLINK, {0}),  # best fit: the half-busy node, not an empty one
        (tuple(range(64)[1::8]), 8, SAME_RACK, {0, 1}),  # every node lost one GPU
        (tuple(g for n in range(8) for g in range(n * 8, n * 8 + 4)), 16, SAME_RACK, {0, 1, 2, 3}),
        (tuple(g for n in range(8) for g in range(n * 8, n * 8 + 6)), 12, CROSS_RACK, set(range(6))),
    ],
    ids=["empty cluster", "best fit island", "spill to rack", "rack of half nodes", "across racks"],
)
def test_best_class_placement(busy, need, klass, nodes):
    choice = find_gang(LAY, usable_except(*busy), need)
    assert choice is not None
    assert len(choice.gpus) == need and len(set(choice.gpus.tolist())) == need
    assert choice.placement_class == klass
    assert set(LAY.gpu_node[choice.gpus].tolist()) == nodes
    assert not set(choice.gpus.tolist()) & set(busy)


def test_max_class_limits_the_search():
    usable = usable_except(*range(64)[1::8])
    assert find_gang(LAY, usable, 8, max_class=CROSS_NUMA) is None
    assert find_gang(LAY, usable, 8, max_class=SAME_RACK).placement_class == SAME_RACK


def test_not_enough_gpus():
    assert find_gang(LAY, usable_except(*range(60)), 5) is None
    with pytest.raises(ValueError):
        find_gang(LAY, usable_except(), 0)


def test_numa_domain_preferred_over_split_node():
    inv = Inventory(nodes=(Node("p", "A10", 8, numa_of_gpu=(0,) * 4 + (1,) * 4),))
    lay = ClusterLayout.of(inv)
    usable = np.ones(8, dtype=bool)
    usable[[0, 1, 4]] = False  # numa0 has 2 free, numa1 has 3 free
    choice = find_gang(lay, usable, 3)
    assert choice.placement_class == SAME_NUMA and choice.gpus.tolist() == [5, 6, 7]


def test_gpu_share_goes_to_the_fullest_gpu_that_fits():
    free = np.full(LAY.n_gpus, 1000)
    free[[3, 9, 20]] = [300, 600, 450]
    usable = free >= 400
    choice = find_gang(LAY, usable, 1, free_milli=free)
    assert choice.gpus.tolist() == [20] and choice.placement_class == NVLINK


def test_single_whole_gpu_best_fit_node():
    usable = np.zeros(LAY.n_gpus, dtype=bool)
    usable[0:8] = True  # node 0 empty
    usable[13] = True  # node 1 has one free GPU
    assert find_gang(LAY, usable, 1).gpus.tolist() == [13]


def test_first_fit_takes_lowest_indices_whatever_the_class():
    usable = usable_except(*range(1, 8))  # node 0 keeps GPU 0
    choice = find_gang(LAY, usable, 2, strategy="first_fit")
    assert choice.gpus.tolist() == [0, 8] and choice.placement_class == SAME_RACK
    assert find_gang(LAY, usable, 2, strategy="first_fit", max_class=NVLINK) is None
