"""The recorded topologies shipped in data/topologies/, for the node agent's tests."""

from __future__ import annotations

from pathlib import Path

from predictor.nodeinfo.records import load_topology
from predictor.nodeinfo.topology import NodeTopology

TOPOLOGY_DIR = Path(__file__).resolve().parents[3] / "data" / "topologies"
RECORDED = {
    "dgx-a100": TOPOLOGY_DIR / "dgx-a100.yaml",
    "dgx-h100": TOPOLOGY_DIR / "dgx-h100.yaml",
    "pcie-4gpu": TOPOLOGY_DIR / "pcie-4gpu-r750xa.yaml",
    "dual-socket-8gpu": TOPOLOGY_DIR / "dual-socket-8gpu-pcie.yaml",
}


def recorded(name: str) -> NodeTopology:
    return load_topology(RECORDED[name])
