"""The node agent: GPU topology of one machine (NVML discovery or a recorded file), the
``nvidia-smi topo -m`` matrix, the inventory ``Node`` record, CPU pinning and CPU isolation plans."""

from predictor.nodeinfo.isolation import IsolationOptions, IsolationPlan, plan_isolation
from predictor.nodeinfo.matrix import render_matrix
from predictor.nodeinfo.nvml import NvmlUnavailable, discover_topology
from predictor.nodeinfo.pinning import PinningPlan, plan_pinning
from predictor.nodeinfo.records import (
    load_topology,
    topology_from_document,
    topology_to_document,
    write_topology,
)
from predictor.nodeinfo.topology import GpuDevice, HostCpus, MigInstance, NodeTopology

__all__ = [
    "GpuDevice",
    "HostCpus",
    "IsolationOptions",
    "IsolationPlan",
    "MigInstance",
    "NodeTopology",
    "NvmlUnavailable",
    "PinningPlan",
    "discover_topology",
    "load_topology",
    "plan_isolation",
    "plan_pinning",
    "render_matrix",
    "topology_from_document",
    "topology_to_document",
    "write_topology",
]
