"""Cluster inventory: nodes, their GPUs, NVLink islands, NUMA nodes and where they sit in the network.

Loaders for YAML files and the public inventories live in ``predictor.capacity.inventory_sources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from features.gpu_types import KNOWN_GPU_TYPES, GpuType, GpuTypeVocabulary

__all__ = ["GpuType", "Node", "Inventory", "KNOWN_GPU_TYPES", "homogeneous_inventory"]


@dataclass(frozen=True, slots=True)
class Node:
    """One machine.

    ``nvlink_islands`` groups GPU indices that share NVLink/NVSwitch (one island of all GPUs on a DGX;
    empty for PCIe-only nodes). ``numa_of_gpu[i]`` is GPU i's NUMA node. ``rack`` is the ToR switch,
    ``block`` the aggregation level above it (None where unknown).

    Residency attributes (docs/residency.md, matched by ``predictor.capacity.eligibility``):
    ``region``, ``site`` (data centre) and ``pool`` (node pool) where known; ``partitions`` the
    Slurm partitions it is in; ``features`` its tags (Slurm node features, Kubernetes labels with
    value ``true``); ``labels`` its other node labels as ``(name, value)`` pairs.
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
    region: str | None = None
    site: str | None = None
    pool: str | None = None
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Inventory:  # not slotted: caches its vocabulary
    """The cluster: nodes and the GPU types they carry."""

    nodes: tuple[Node, ...]
    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)  # more spellings of its types (alias -> type)

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
        object.__setattr__(self, "aliases", MappingProxyType(dict(self.aliases)))

    @cached_property
    def vocabulary(self) -> GpuTypeVocabulary:
        """This cluster's GPU types and every spelling of them (``features.gpu_types``)."""
        return GpuTypeVocabulary(self.gpu_types, self.aliases)

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
