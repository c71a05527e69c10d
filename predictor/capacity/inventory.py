"""Cluster inventory: nodes, their GPUs, NVLink islands, NUMA nodes and where they sit in the network.

Loaders for YAML files and the public inventories live in ``predictor.capacity.inventory_sources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["GpuType", "Node", "Inventory", "KNOWN_GPU_TYPES", "homogeneous_inventory"]


@dataclass(frozen=True, slots=True)
class GpuType:
    """A GPU model: memory per device (MiB) and a relative cost per GPU-hour used to pick the cheapest fit."""

    name: str
    memory_mib: int
    cost_per_hour: float = 1.0


#: Memory sizes of common data-centre GPUs (vendor datasheets) and a rough relative price.
KNOWN_GPU_TYPES: Mapping[str, GpuType] = MappingProxyType(
    {
        g.name: g
        for g in (
            GpuType("K80", 11_441, 0.2),
            GpuType("P100", 16_384, 0.4),
            GpuType("T4", 15_360, 0.35),
            GpuType("V100", 16_384, 0.6),
            GpuType("V100M32", 32_768, 0.75),
            GpuType("G2", 24_576, 0.5),  # openb trace's anonymised types
            GpuType("G3", 24_576, 0.5),
            GpuType("A10", 24_576, 0.6),
            GpuType("A40", 46_068, 0.9),
            GpuType("L40S", 46_068, 1.1),
            GpuType("A100-40GB", 40_960, 1.2),
            GpuType("A100-80GB", 81_920, 1.6),
            GpuType("H100-80GB", 81_559, 2.5),
            GpuType("H200", 143_771, 3.2),
            GpuType("B200", 183_359, 4.0),
        )
    }
)


@dataclass(frozen=True, slots=True)
class Node:
    """One machine.

    ``nvlink_islands`` groups GPU indices that share NVLink/NVSwitch (one island of all GPUs on a DGX;
    empty for PCIe-only nodes). ``numa_of_gpu[i]`` is GPU i's NUMA node. ``rack`` is the ToR switch,
    ``block`` the aggregation level above it (None where unknown).
    """

    name: str
    gpu_type: str | None
    num_gpus: int
    nvlink_islands: tuple[tuple[int, ...], ...] = ()
    numa_of_gpu: tuple[int, ...] = ()
    rack: str | None = None
    block: str | None = None
    cpus: int | None = None
    mem_mib: int | None = None


@dataclass(frozen=True)
class Inventory:
    """The cluster: nodes and the GPU types they carry."""

    nodes: tuple[Node, ...]
    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[:5]
            raise ValueError(f"inventory has duplicate node names: {', '.join(dup)}")
        types = dict(self.gpu_types)
        for n in self.nodes:
            if n.gpu_type and n.gpu_type not in types:
                if n.gpu_type in KNOWN_GPU_TYPES:
                    types[n.gpu_type] = KNOWN_GPU_TYPES[n.gpu_type]
                else:
                    raise ValueError(
                        f"node {n.name}: GPU type {n.gpu_type!r} has no memory size; add it under gpu_types"
                    )
        object.__setattr__(self, "gpu_types", MappingProxyType(types))

    @property
    def total_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes)

    def gpus_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            if n.gpu_type and n.num_gpus:
                out[n.gpu_type] = out.get(n.gpu_type, 0) + n.num_gpus
        return out


def homogeneous_inventory(total_gpus: int, gpus_per_node: int = 8, gpu_type: str = "A100-80GB",
                          nodes_per_rack: int = 16) -> Inventory:
    """A cluster of identical DGX-style nodes (one NVLink island per node, two NUMA nodes)."""
    if total_gpus <= 0:
        raise ValueError(f"total_gpus must be positive, got {total_gpus}")
    n_nodes = -(-total_gpus // gpus_per_node)
    half = gpus_per_node // 2
    nodes = tuple(
        Node(
            name=f"node-{i:04d}",
            gpu_type=gpu_type,
            num_gpus=gpus_per_node,
            nvlink_islands=(tuple(range(gpus_per_node)),),
            numa_of_gpu=tuple(0 if g < half else 1 for g in range(gpus_per_node)),
            rack=f"rack-{i // nodes_per_rack:03d}",
            block=f"block-{i // (nodes_per_rack * 8):02d}",
        )
        for i in range(n_nodes)
    )
    return Inventory(nodes=nodes)
