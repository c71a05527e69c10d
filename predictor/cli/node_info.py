"""``predictor node-info``: the node agent. Discovers this machine's GPUs with NVML (or reads a recorded
topology), prints the topology matrix like ``nvidia-smi topo -m``, the inventory record as JSON, and
CPU pinning plans for Slurm and Kubernetes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from predictor.nodeinfo.cpulist import format_cpulist
from predictor.nodeinfo.matrix import render_matrix
from predictor.nodeinfo.nvml import NvmlUnavailable, discover_topology
from predictor.nodeinfo.pinning import PinningPlan, plan_pinning
from predictor.nodeinfo.records import load_topology, topology_to_document, write_topology
from predictor.nodeinfo.topology import NodeTopology

ORDER = 80
_err = Console(stderr=True)


def node_document(topo: NodeTopology, plan: PinningPlan | None, node_name: str | None = None,
                  rack: str | None = None, block: str | None = None) -> dict[str, Any]:
    """The ``--json`` document: the topology (readable again with ``--from``), the inventory Node
    record and, where host CPUs are known, the pinning plan."""
    doc = topology_to_document(topo)
    node = topo.to_inventory_node(name=node_name, rack=rack, block=block)
    doc["inventory_node"] = json.loads(json.dumps(dataclasses.asdict(node)))
    doc["inventory_entry"] = topo.inventory_entry(name=node_name, rack=rack, block=block)  # for an inventory YAML
    doc["gpu_types"] = topo.gpu_types_used()
    if plan is not None:
        doc["pinning"] = {
            "reserved_cores_per_socket": plan.reserved_cores_per_socket,
            "reserved_cpus": format_cpulist(plan.reserved_cpus),
            "gpus": [{"gpu": p.gpu, "numa_node": p.numa_node, "local_cpus": format_cpulist(p.local_cpus),
                      "rank_cpus": format_cpulist(p.rank_cpus), "slurm_cores": format_cpulist(p.slurm_cores)}
                     for p in plan.gpus],
            "slurm": {"gres_conf": plan.gres_conf_lines(node_name), "node_line": plan.slurm_node_line(node_name),
                      "cpu_bind_map": plan.srun_cpu_bind_map(), "cpu_bind_mask": plan.srun_cpu_bind_mask()},
            "kubelet": plan.kubelet_config(),
        }
    return doc


def render_pinning(plan: PinningPlan, node_name: str | None = None) -> str:
    """The pinning plan as text an admin pastes into gres.conf, slurm.conf, srun and kubelet config."""
    lines = [f"# CPU pinning plan: {plan.reserved_cores_per_socket} core(s) per socket reserved for the system "
             f"(CPUs {format_cpulist(plan.reserved_cpus) or 'none'})", ""]
    for p in plan.gpus:
        lines.append(f"# GPU{p.gpu}: NUMA {p.numa_node if p.numa_node is not None else 'N/A'}, "
                     f"local CPUs {format_cpulist(p.local_cpus)}, per-rank share {format_cpulist(p.rank_cpus)}")
    lines += ["", "# --- Slurm gres.conf (Cores= are Slurm logical core indices) ---", *plan.gres_conf_lines(node_name),
              "", "# --- Slurm slurm.conf node line ---", plan.slurm_node_line(node_name),
              "", "# --- srun: one task per GPU, task i bound near GPU i ---",
              f"srun --ntasks-per-node={len(plan.gpus)} {plan.srun_cpu_bind_map()} ...",
              f"srun --ntasks-per-node={len(plan.gpus)} {plan.srun_cpu_bind_mask()} ...",
              "", "# --- Kubernetes kubelet configuration (CPU manager + Topology Manager) ---",
              yaml.safe_dump(plan.kubelet_config(), sort_keys=False).rstrip()]
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("node-info")
    def node_info(
        from_file: Annotated[Path | None, typer.Option("--from", help="Recorded topology (YAML/JSON) instead of NVML.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the topology, inventory Node and pinning as JSON.")] = False,
        pinning: Annotated[bool, typer.Option("--pinning", help="Print CPU pinning plans for Slurm and Kubernetes.")] = False,
        reserve_cores: Annotated[int, typer.Option(help="Cores per socket left to the OS and interrupts.")] = 2,
        node_name: Annotated[str | None, typer.Option(help="Node name to use (default: the host name).")] = None,
        rack: Annotated[str | None, typer.Option(help="Rack (ToR switch) of this node, for the inventory.")] = None,
        block: Annotated[str | None, typer.Option(help="Block (aggregation level) of this node.")] = None,
        out: Annotated[Path | None, typer.Option(help="Also write the topology here (.json or .yaml) for --from.")] = None,
    ) -> None:
        """Discover GPUs, NVLink/PCIe topology, NUMA and CPU affinity, MIG; print the topology matrix."""
        if from_file is not None:
            topo = load_topology(from_file)
        else:
            try:
                topo = discover_topology(hostname=node_name)
            except NvmlUnavailable as exc:
                typer.echo(f"error: {exc}. Run on a GPU node, or pass --from FILE with a recorded topology "
                           "(e.g. data/topologies/dgx-a100.yaml).", err=True)
                raise typer.Exit(1) from None
        plan = plan_pinning(topo, reserve_cores) if topo.host is not None else None
        if out is not None:
            write_topology(topo, out)
        if as_json:
            typer.echo(json.dumps(node_document(topo, plan, node_name, rack, block), indent=2))
            return
        if topo.title:
            typer.echo(f"# {topo.title}" + (f" (source: {topo.source})" if topo.source else ""))
        typer.echo(render_matrix(topo), nl=False)
        node = topo.to_inventory_node(name=node_name, rack=rack, block=block)
        islands = " ".join("[" + ",".join(map(str, i)) + "]" for i in node.nvlink_islands) or "none"
        typer.echo(f"\nnode {node.name}: {node.num_gpus} x {node.gpu_type}, NVLink islands {islands}, "
                   f"GPU NUMA nodes {list(node.numa_of_gpu) or 'unknown'}, CPUs {node.cpus or 'unknown'}")
        if pinning:
            if plan is None:
                _err.print("[yellow]no host CPU information in this topology: no pinning plan[/]")
            else:
                typer.echo("\n" + render_pinning(plan, node_name), nl=False)
