import pytest

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.inventory import Inventory, Node
from predictor.nodeinfo.topology import GpuDevice, HostCpus, NodeTopology, inventory_gpu_type
from tests.predictor.nodeinfo.topologies import RECORDED, recorded


@pytest.mark.parametrize(
    ("name", "gpus", "gpu_type", "islands", "numa", "cpus"),
    [
        ("dgx-a100", 8, "A100-80GB", ((0, 1, 2, 3, 4, 5, 6, 7),), (3, 3, 1, 1, 7, 7, 5, 5), 256),
        ("dgx-h100", 8, "H100-80GB", ((0, 1, 2, 3, 4, 5, 6, 7),), (0, 0, 0, 0, 1, 1, 1, 1), 224),
        ("pcie-4gpu", 4, "A100-80GB", (), (0, 0, 1, 1), 128),
        ("dual-socket-8gpu", 8, "V100M32", (), (0, 0, 0, 0, 1, 1, 1, 1), 80),
    ],
)
def test_recorded_topology_gives_the_inventory_node(name, gpus, gpu_type, islands, numa, cpus):
    node = recorded(name).to_inventory_node(rack="r1")
    assert isinstance(node, Node)
    assert (node.num_gpus, node.gpu_type, node.nvlink_islands, node.numa_of_gpu, node.cpus) == (
        gpus, gpu_type, islands, numa, cpus)
    assert Inventory(nodes=(node,)).total_gpus == gpus  # the contract accepts it as is


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_layouts_are_physically_consistent(name):
    topo = recorded(name)
    host = topo.host
    assert host is not None
    for g in topo.gpus:
        # nvidia-smi's CPU affinity of a GPU is exactly the CPUs of its NUMA node
        assert g.cpu_affinity == host.cpus_of_numa(g.numa_node)
    for a in topo.gpus:
        for b in topo.gpus:
            if a.index == b.index:
                continue
            cross_numa = a.numa_node != b.numa_node
            assert (topo.pcie[a.index][b.index] == "SYS") == cross_numa, (a.index, b.index)


@pytest.mark.parametrize(
    ("name", "gpus", "expected"),
    [
        ("dgx-a100", (0, 5), "nvlink"),
        ("dgx-a100", tuple(range(8)), "nvlink"),
        ("pcie-4gpu", (0, 1), "pcie_same_numa"),
        ("pcie-4gpu", (1, 2), "cross_numa"),
        ("dual-socket-8gpu", (0, 1, 2, 3), "pcie_same_numa"),
        ("dual-socket-8gpu", (3, 4), "cross_numa"),
        ("dual-socket-8gpu", (2,), "nvlink"),  # a single GPU crosses no link at all
    ],
)
def test_placement_class_is_the_worst_link(name, gpus, expected):
    assert recorded(name).placement_class(gpus) == expected
    assert expected in PLACEMENT_CLASSES


def test_link_cells_prefer_nvlink_over_pcie():
    topo = recorded("dgx-h100")
    assert topo.link(0, 0) == "X"
    assert topo.link(0, 5) == "NV18"
    assert topo.pcie[0][5] == "SYS"


@pytest.mark.parametrize(
    ("nvml_name", "memory_mib", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 81920, "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
        ("NVIDIA H200", 143771, "H200"),
        ("Tesla V100-PCIE-32GB", 32510, "V100M32"),
        ("Tesla V100-SXM2-16GB", 16160, "V100"),
        ("NVIDIA A10", 23028, "A10"),
        ("NVIDIA L40S", 46068, "L40S"),
        ("NVIDIA RTX A6000", 49140, "RTX-A6000"),
    ],
)
def test_inventory_gpu_type(nvml_name, memory_mib, expected):
    assert inventory_gpu_type(nvml_name, memory_mib) == expected


def _two_gpus(**changes):
    base = dict(
        hostname="n",
        gpus=(GpuDevice(0, "NVIDIA A10", 23028), GpuDevice(1, "NVIDIA A10", 23028)),
        pcie=(("X", "PIX"), ("PIX", "X")),
        nvlink=((0, 0), (0, 0)),
    )
    base.update(changes)
    return NodeTopology(**base)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pcie": (("X", "PIX"), ("SYS", "X"))}, "differs"),
        ({"pcie": (("X", "QPI"), ("QPI", "X"))}, "expected one of"),
        ({"pcie": (("X",),)}, "2x2"),
        ({"nvlink": ((0, 2), (1, 0))}, "differs"),
        ({"pcie": (("PIX", "PIX"), ("PIX", "X"))}, "diagonal"),
        ({"gpus": (GpuDevice(1, "A10", 1), GpuDevice(0, "A10", 1))}, "indices"),
        ({"gpus": (GpuDevice(0, "A10", 1, numa_node=4), GpuDevice(1, "A10", 1)),
          "host": HostCpus.from_layout(1, 2, 1, {0: (0, 1)})}, "NUMA node 4"),
    ],
)
def test_topology_rejects_inconsistent_matrices(changes, message):
    with pytest.raises(ValueError, match=message):
        _two_gpus(**changes)


@pytest.mark.parametrize(
    ("numa", "message"),
    [
        ({0: (0, 1), 1: (1, 2, 3)}, "listed in NUMA nodes 0 and 1"),
        ({0: (0, 1, 2)}, "CPU 3 is in no NUMA node"),
        ({0: (0, 1, 2, 3, 4)}, "CPU 4 does not exist"),
        ({0: (0, 1), 1: (2, 3)}, "spans several sockets"),
    ],
)
def test_host_layout_errors(numa, message):
    # 2 sockets x 1 core x 2 threads: CPU 0 is socket 0, CPU 1 socket 1, CPU 2 socket 0, CPU 3 socket 1
    with pytest.raises(ValueError, match=message):
        HostCpus.from_layout(2, 1, 2, numa)


def test_layout_numbering_puts_sibling_threads_after_all_cores():
    host = HostCpus.from_layout(2, 4, 2, {0: (0, 1, 2, 3, 8, 9, 10, 11), 1: (4, 5, 6, 7, 12, 13, 14, 15)})
    assert host.cpus_of_core(0, 0) == (0, 8)
    assert host.cpus_of_core(1, 3) == (7, 15)
    assert host.cores()[4] == (1, 0)  # Slurm logical core 4 is the first core of socket 1
    assert host.threads_per_core == 2
