"""The topology matrix as ``nvidia-smi topo -m`` prints it: one row and column per GPU, then each
GPU's CPU affinity and NUMA affinity, then the legend."""

from __future__ import annotations

from predictor.nodeinfo.cpulist import format_cpulist
from predictor.nodeinfo.topology import NodeTopology

__all__ = ["LEGEND", "render_matrix"]

LEGEND: tuple[tuple[str, str], ...] = (
    ("X", "Self"),
    ("SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"),
    ("NODE", "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    ("PXB", "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)


def render_matrix(topo: NodeTopology, legend: bool = True) -> str:
    """Render ``topo`` like ``nvidia-smi topo -m`` (tab-free, aligned columns).

    Parameters
    ----------
    topo : NodeTopology
        The node to draw.
    legend : bool
        Append the legend explaining the link classes.

    Returns
    -------
    str
        The matrix, one line per GPU, ending with a newline.
    """
    n = len(topo.gpus)
    if n == 0:
        return "No GPUs found.\n"
    names = [f"GPU{i}" for i in range(n)]
    affinity = [format_cpulist(g.cpu_affinity) or "N/A" for g in topo.gpus]
    numa = ["N/A" if g.numa_node is None else str(g.numa_node) for g in topo.gpus]
    header = ["", *names, "CPU Affinity", "NUMA Affinity"]
    rows = [[names[i], *(topo.link(i, j) for j in range(n)), affinity[i], numa[i]] for i in range(n)]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[c]) for c, cell in enumerate(r)).rstrip() for r in [header, *rows]]
    text = "\n".join(lines) + "\n"
    mig = [g for g in topo.gpus if g.mig_enabled]
    for g in mig:
        profiles = ", ".join(m.profile for m in g.mig_instances) or "no instances created"
        text += f"\nGPU{g.index}: MIG enabled ({profiles})"
    if mig:
        text += "\n"
    if legend:
        text += "\nLegend:\n\n" + "\n".join(f"  {k:<4} = {v}" for k, v in LEGEND) + "\n"
    return text
