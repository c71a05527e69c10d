"""Recorded node topologies: the YAML/JSON document ``predictor node-info --json`` writes and
``--from FILE`` reads back, so the node agent's logic runs on machines without a GPU driver.

Document (``format: predictor.node-topology/v1``)::

    title: NVIDIA DGX A100            # what machine this is
    source: where the layout comes from (a document, or "nvml" for a live discovery)
    hostname: dgx-a100
    host:                             # CPUs, either as a layout ...
      sockets: 2
      cores_per_socket: 64
      threads_per_core: 2
      numa_nodes: {0: "0-15,128-143", 1: "16-31,144-159"}
      # ... or thread by thread: threads: [[cpu, socket, core, numa_node], ...]
    gpus:
      - {index: 0, name: NVIDIA A100-SXM4-80GB, memory_mib: 81920, numa_node: 3,
         cpu_affinity: "48-63,176-191", pci_bus_id: "00000000:07:00.0",
         mig: {enabled: true, instances: [{profile: 3g.40gb, memory_mib: 40192}]}}
    pcie:   [[X, PXB, ...], ...]     # PCIe class between GPU pairs (nvidia-smi names)
    nvlink: [[0, 12, ...], ...]      # NVLinks between GPU pairs

The compact layout form assumes the Linux numbering described in ``HostCpus.from_layout``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from features.errors import InputError
from features.yaml_files import read_yaml_mapping
from predictor.nodeinfo.cpulist import format_cpulist, parse_cpulist
from predictor.nodeinfo.topology import CpuThread, GpuDevice, HostCpus, MigInstance, NodeTopology

__all__ = ["FORMAT", "load_topology", "topology_from_document", "topology_to_document", "write_topology"]

FORMAT = "predictor.node-topology/v1"


def load_topology(path: str | Path) -> NodeTopology:
    """Read a recorded topology (YAML or JSON) and check it; errors name the file and field."""
    path = Path(path)
    doc = read_yaml_mapping(path, "topology file")  # YAML is a superset of JSON
    try:
        return topology_from_document(doc)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


def _require(doc: dict, key: str, where: str) -> Any:
    if key not in doc or doc[key] is None:
        raise InputError(f"{where}{key}: missing")
    return doc[key]


def _host_from(doc: Any) -> HostCpus | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise InputError("host: must be a mapping")
    if "threads" in doc:
        try:
            return HostCpus(threads=tuple(CpuThread(int(c), int(s), int(k), int(n)) for c, s, k, n in doc["threads"]))
        except (TypeError, ValueError) as exc:
            raise InputError(f"host.threads: {exc} (expected rows [cpu, socket, core, numa_node])") from None
    sockets = _require(doc, "sockets", "host.")
    cores = _require(doc, "cores_per_socket", "host.")
    numa = _require(doc, "numa_nodes", "host.")
    if not isinstance(numa, dict):
        raise InputError("host.numa_nodes: must map NUMA node ids to CPU lists")
    try:
        numa_cpus = {int(k): parse_cpulist(str(v)) for k, v in numa.items()}
        return HostCpus.from_layout(sockets=int(sockets), cores_per_socket=int(cores),
                                    threads_per_core=int(doc.get("threads_per_core", 1)), numa_cpus=numa_cpus)
    except (TypeError, ValueError) as exc:
        raise InputError(f"host: {exc}") from None


def _gpu_from(doc: Any, i: int) -> GpuDevice:
    where = f"gpus[{i}]."
    if not isinstance(doc, dict):
        raise InputError(f"gpus[{i}]: must be a mapping")
    mig = doc.get("mig") or {}
    try:
        instances = tuple(
            MigInstance(profile=str(m["profile"]), memory_mib=int(m["memory_mib"]), uuid=m.get("uuid"))
            for m in mig.get("instances", ())
        )
        numa = doc.get("numa_node")
        return GpuDevice(
            index=int(_require(doc, "index", where)),
            name=str(_require(doc, "name", where)),
            memory_mib=int(_require(doc, "memory_mib", where)),
            pci_bus_id=doc.get("pci_bus_id"),
            uuid=doc.get("uuid"),
            numa_node=None if numa is None else int(numa),
            cpu_affinity=parse_cpulist(str(doc.get("cpu_affinity") or "")),
            mig_enabled=bool(mig.get("enabled", False)),
            mig_instances=instances,
        )
    except InputError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"gpus[{i}]: {exc}") from None


def topology_from_document(doc: Any) -> NodeTopology:
    """Build a NodeTopology from a parsed document (see the module docstring)."""
    if not isinstance(doc, dict):
        raise InputError("a topology document must be a mapping at the top level")
    fmt = doc.get("format", FORMAT)
    if fmt != FORMAT:
        raise InputError(f"format: {fmt!r} is not {FORMAT!r}")
    gpus_doc = _require(doc, "gpus", "")
    if not isinstance(gpus_doc, list):
        raise InputError("gpus: must be a list")
    gpus = tuple(_gpu_from(g, i) for i, g in enumerate(gpus_doc))
    n = len(gpus)
    pcie = doc.get("pcie", [["X"]] if n == 1 else None) if n else []
    nvlink = doc.get("nvlink", [[0] * n for _ in range(n)])
    if pcie is None:
        raise InputError("pcie: missing (one row per GPU of nvidia-smi classes PIX/PXB/PHB/NODE/SYS)")
    try:
        pcie_t = tuple(tuple(str(c) for c in row) for row in pcie)
        nvlink_t = tuple(tuple(int(c) for c in row) for row in nvlink)
    except (TypeError, ValueError) as exc:
        raise InputError(f"pcie/nvlink: {exc}") from None
    try:
        return NodeTopology(
            hostname=str(doc.get("hostname") or "node"),
            gpus=gpus,
            pcie=pcie_t,
            nvlink=nvlink_t,
            host=_host_from(doc.get("host")),
            driver_version=doc.get("driver_version"),
            host_memory_mib=None if doc.get("host_memory_mib") is None else int(doc["host_memory_mib"]),
            source=str(doc.get("source") or ""),
            title=str(doc.get("title") or ""),
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _host_to_document(host: HostCpus) -> dict[str, Any]:
    sockets = host.sockets
    cores_per_socket = len(host.cores()) // max(len(sockets), 1)
    numa = {n: host.cpus_of_numa(n) for n in host.numa_nodes}
    try:
        layout = HostCpus.from_layout(len(sockets), cores_per_socket, host.threads_per_core, numa)
    except ValueError:
        layout = None
    if layout == host:
        return {"sockets": len(sockets), "cores_per_socket": cores_per_socket,
                "threads_per_core": host.threads_per_core,
                "numa_nodes": {n: format_cpulist(c) for n, c in numa.items()}}
    return {"threads": [[t.cpu, t.socket, t.core, t.numa_node] for t in host.threads]}


def topology_to_document(topo: NodeTopology) -> dict[str, Any]:
    """The document form of ``topo`` (the inverse of ``topology_from_document``)."""
    gpus = []
    for g in topo.gpus:
        entry: dict[str, Any] = {"index": g.index, "name": g.name, "gpu_type": g.gpu_type,
                                 "memory_mib": g.memory_mib, "numa_node": g.numa_node,
                                 "cpu_affinity": format_cpulist(g.cpu_affinity)}
        if g.pci_bus_id:
            entry["pci_bus_id"] = g.pci_bus_id
        if g.uuid:
            entry["uuid"] = g.uuid
        entry["mig"] = {"enabled": g.mig_enabled,
                        "instances": [{"profile": m.profile, "memory_mib": m.memory_mib,
                                       **({"uuid": m.uuid} if m.uuid else {})} for m in g.mig_instances]}
        gpus.append(entry)
    doc: dict[str, Any] = {"format": FORMAT, "title": topo.title, "source": topo.source,
                           "hostname": topo.hostname, "driver_version": topo.driver_version}
    if topo.host_memory_mib is not None:
        doc["host_memory_mib"] = topo.host_memory_mib
    if topo.host is not None:
        doc["host"] = _host_to_document(topo.host)
    doc["gpus"] = gpus
    doc["pcie"] = [list(row) for row in topo.pcie]
    doc["nvlink"] = [list(row) for row in topo.nvlink]
    return doc


def write_topology(topo: NodeTopology, path: str | Path) -> Path:
    """Write ``topo`` as JSON (``.json``) or YAML, atomically (temp file, then rename)."""
    path = Path(path)
    doc = topology_to_document(topo)
    text = json.dumps(doc, indent=2) + "\n" if path.suffix == ".json" else yaml.safe_dump(doc, sort_keys=False)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
