import numpy as np
import pytest

from predictor.capacity.inventory import Inventory, Node, homogeneous_inventory
from predictor.capacity.layout import CROSS_NUMA, CROSS_RACK, NVLINK, SAME_NUMA, SAME_RACK, ClusterLayout

INV = homogeneous_inventory(64, nodes_per_rack=4)  # 8 nodes x 8 GPUs, racks of 4 nodes
LAY = ClusterLayout.of(INV)


def g(node: int, *local: int) -> list[int]:
    return [node * 8 + i for i in local]


@pytest.mark.parametrize(
    "gpus, expected",
    [
        (g(0, 3), NVLINK),
        (g(0, 0, 1, 2, 3, 4, 5, 6, 7), NVLINK),
        (g(0, 0) + g(1, 0), SAME_RACK),
        (g(0, 0) + g(4, 0), CROSS_RACK),
    ],
    ids=["one GPU", "whole island", "two nodes one rack", "two racks"],
)
def test_placement_class_of_dgx_gpus(gpus, expected):
    assert LAY.placement_class(np.array(gpus)) == expected


def test_numa_and_unknown_topology_classes():
    inv = Inventory(nodes=(
        Node("pcie", "A10", 4, numa_of_gpu=(0, 0, 1, 1), rack="r"),
        Node("bare", "A10", 4),  # no NUMA, no rack
        Node("bare2", "A10", 4),
    ))
    lay = ClusterLayout.of(inv)
    assert lay.placement_class(np.array([0, 1])) == SAME_NUMA
    assert lay.placement_class(np.array([1, 2])) == CROSS_NUMA
    assert lay.placement_class(np.array([4, 5])) == CROSS_NUMA  # unknown NUMA never claims better
    assert lay.placement_class(np.array([4, 8])) == CROSS_RACK  # unknown rack never claims same rack


def test_gpu_indices_round_trip_and_grouping():
    gpus = np.array(g(2, 1, 5) + g(7, 0))
    assert LAY.gpus_by_node(gpus) == (("node-0002", 2), ("node-0007", 1))
    assert LAY.gpu_indices_by_node(gpus) == (("node-0002", (1, 5)), ("node-0007", (0,)))
    assert LAY.gpu_index("node-0007", 0) == 56
    with pytest.raises(KeyError, match="no node"):
        LAY.gpu_index("nope", 0)
    with pytest.raises(KeyError, match="has 8 GPUs"):
        LAY.gpu_index("node-0001", 8)


def test_types_sorted_cheapest_first_and_cpu_nodes_hold_nothing():
    inv = Inventory(nodes=(Node("big", "H200", 8), Node("cpu", None, 0), Node("small", "T4", 2)))
    lay = ClusterLayout.of(inv)
    assert lay.gpu_types == ("T4", "H200")
    assert lay.n_gpus == 10
    assert lay.node_type.tolist() == [1, -1, 0]
    assert lay.gpus_of_type().tolist() == [2, 8]


def test_layout_is_cached_per_inventory_object():
    assert ClusterLayout.of(INV) is LAY


def test_max_gang_per_class():
    assert LAY.max_gang_per_class().tolist() == [[8, 8, 8, 32, 64]]
