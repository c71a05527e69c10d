"""``predictor node-info``: the node agent. Discovers this machine's GPUs with NVML (or reads a recorded
topology), prints the topology matrix like ``nvidia-smi topo -m``, the inventory record as JSON, CPU
pinning plans for Slurm and Kubernetes, and CPU isolation plans (kernel, systemd, Slurm, kubelet)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from features.errors import InputError
from predictor.nodeinfo.cpulist import format_cpulist, parse_cpulist
from predictor.nodeinfo.isolation import (
    DEFAULT_ISOLCPUS_FLAGS,
    KUBELET_DROPIN,
    PURPOSE,
    SYSTEMD_DROPIN,
    IsolationOptions,
    IsolationPlan,
    plan_isolation,
)
from predictor.nodeinfo.matrix import render_matrix
from predictor.nodeinfo.nvml import NvmlUnavailable, discover_topology
from predictor.nodeinfo.pinning import PinningPlan, plan_pinning
from predictor.nodeinfo.records import load_topology, topology_to_document, write_topology
from predictor.nodeinfo.topology import NodeTopology

ORDER = 80
_err = Console(stderr=True)


def node_document(topo: NodeTopology, plan: PinningPlan | None, node_name: str | None = None,
                  rack: str | None = None, block: str | None = None,
                  isolation: IsolationPlan | None = None) -> dict[str, Any]:
    """The ``--json`` document: the topology (readable again with ``--from``), the inventory Node
    record, where host CPUs are known the pinning plan, and the isolation plan when one is given."""
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
    if isolation is not None:
        doc["isolation"] = isolation.to_document(node_name)
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


def render_isolation(plan: IsolationPlan, node_name: str | None = None) -> str:
    """The plan as text an admin pastes into the boot loader, systemd, Slurm and kubelet configuration."""
    hk, iso = plan.housekeeping_cpus, plan.isolated_cpus
    lines = [f"# CPU isolation plan for {node_name or plan.topology.hostname}: {plan.housekeeping_core_count} "
             f"housekeeping core(s) (CPUs {format_cpulist(hk)}), {len(iso)} CPUs isolated",
             "# What it is for: " + PURPOSE, ""]
    for n in plan.numa:
        gpus = ", ".join(f"GPU{g.gpu} {format_cpulist(g.rank_cpus)}" for g in plan.gpus if g.gpu in n.gpus)
        lines.append(f"# NUMA {n.numa_node} (socket {n.socket}): housekeeping {format_cpulist(n.housekeeping_cpus)}, "
                     f"isolated {format_cpulist(n.isolated_cpus)}; " + (f"GPU shares {gpus}" if gpus else "no GPU"))
    if any(g.numa_node is None for g in plan.gpus):
        lines += [f"# GPU{g.gpu} (NUMA unknown): share {format_cpulist(g.rank_cpus)}" for g in plan.gpus
                  if g.numa_node is None]
    lines += ["", "# --- Kernel command line: append to GRUB_CMDLINE_LINUX (/etc/default/grub), then update-grub "
              "or grub2-mkconfig; or grubby --update-kernel=ALL --args=\"...\" ---", plan.kernel_cmdline(),
              "", "# --- irqbalance (/etc/default/irqbalance or /etc/sysconfig/irqbalance) ---", plan.irqbalance_line(),
              "", f"# --- systemd: {SYSTEMD_DROPIN} (PID 1 and the services it starts) ---",
              plan.systemd_dropin().rstrip(),
              "", "# --- Slurm slurm.conf (CpuSpecList: Slurm abstract CPU ids of the housekeeping cores) ---",
              *plan.slurm_conf_lines(node_name), "", "# --- Slurm cgroup.conf ---", *plan.cgroup_conf_lines(),
              "", f"# --- Kubernetes: {KUBELET_DROPIN} (KubeletConfiguration drop-in, kubelet --config-dir) ---",
              yaml.safe_dump(plan.kubelet_config(), sort_keys=False).rstrip(),
              "", "# --- Who gets the isolated cores (tiers of the policy) ---"]
    if not plan.tiers:
        lines.append("# (no policy tiers given)")
    for t in plan.tiers:
        sla = f"SLA class {t.sla_class}" if t.sla_class else "no SLA class"
        if t.isolated:
            lines.append(f"# {t.tier} ({sla}): isolated cores, exclusive, one rank per GPU on its share")
        else:
            lines.append(f"# {t.tier} ({sla}): no isolated cores")
    if any(t.isolated for t in plan.tiers) and plan.gpus:
        lines += [f"#   Slurm: srun --ntasks-per-node={len(plan.gpus)} {plan.srun_cpu_bind_mask()} ...",
                  "#   Kubernetes: Guaranteed QoS pods with integer CPU requests (the static CPU manager gives "
                  "them exclusive isolated CPUs)"]
    lines += ["", "# --- Notes ---", *(f"# - {note}" for note in plan.notes())]
    return "\n".join(lines) + "\n"


def isolation_options(housekeeping_cores: int | None, housekeeping_cpus: str | None, isolcpus_flags: str | None,
                      isolated_tiers: list[str] | None) -> IsolationOptions:
    """IsolationOptions from the command-line values (None: not given)."""
    if housekeeping_cores is not None and housekeeping_cpus is not None:
        raise InputError("give --housekeeping-cores or --housekeeping-cpus, not both")
    try:
        cpus = parse_cpulist(housekeeping_cpus) if housekeeping_cpus is not None else None
    except ValueError as exc:
        raise InputError(f"--housekeeping-cpus: {exc}") from None
    if cpus == ():
        raise InputError("--housekeeping-cpus: empty CPU list")
    flags = (tuple(f.strip() for f in isolcpus_flags.split(",")) if isolcpus_flags is not None
             else DEFAULT_ISOLCPUS_FLAGS)
    return IsolationOptions(housekeeping_cores=1 if housekeeping_cores is None else housekeeping_cores,
                            housekeeping_cpus=cpus, isolcpus_flags=flags,
                            isolated_tiers=tuple(isolated_tiers) if isolated_tiers else None)


def policy_tiers(policy_file: Path | None) -> dict[str, str | None]:
    """The policy's tiers, name -> SLA class, in policy order (the shipped default policy when None)."""
    from predictor.policy.presets import load_policy

    return {name: tier.sla_class for name, tier in load_policy(policy_file).tiers.items()}


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
        isolation: Annotated[bool, typer.Option("--isolation", help=(
            "Print the CPU isolation plan: kernel command line, irqbalance, systemd CPUAffinity, Slurm "
            "CpuSpecList, kubelet reservedSystemCPUs, and which tiers get the isolated cores."))] = False,
        housekeeping_cores: Annotated[int | None, typer.Option(
            help="With --isolation: physical cores per NUMA node kept for the OS (default 1).")] = None,
        housekeeping_cpus: Annotated[str | None, typer.Option(
            help="With --isolation: explicit housekeeping CPU list (e.g. 0-1,64-65), widened to whole cores.")] = None,
        isolcpus_flags: Annotated[str | None, typer.Option(
            help="With --isolation: isolcpus= flags (default managed_irq,domain).")] = None,
        isolated_tier: Annotated[list[str] | None, typer.Option(
            help="With --isolation: a tier whose jobs get isolated cores (repeat; default: tiers with an SLA class).")] = None,
        policy_file: Annotated[Path | None, typer.Option(
            "--policy", help="With --isolation: policy file whose tiers are planned (default: the shipped policy).")] = None,
    ) -> None:
        """Discover GPUs, NVLink/PCIe topology, NUMA and CPU affinity, MIG; print the topology matrix.

        Example: predictor node-info --from data/topologies/dgx-a100.yaml --pinning --node-name dgx-01
        """
        given = {"--housekeeping-cores": housekeeping_cores, "--housekeeping-cpus": housekeeping_cpus,
                 "--isolcpus-flags": isolcpus_flags, "--isolated-tier": isolated_tier, "--policy": policy_file}
        stray = [name for name, value in given.items() if value is not None]
        if stray and not isolation:
            raise InputError(f"{stray[0]} needs --isolation")
        options = (isolation_options(housekeeping_cores, housekeeping_cpus, isolcpus_flags, isolated_tier)
                   if isolation else None)
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
        isolation_plan = (plan_isolation(topo, options, policy_tiers(policy_file)) if options is not None else None)
        if out is not None:
            write_topology(topo, out)
        if as_json:
            typer.echo(json.dumps(node_document(topo, plan, node_name, rack, block, isolation_plan), indent=2))
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
        if isolation_plan is not None:
            typer.echo("\n" + render_isolation(isolation_plan, node_name), nl=False)
