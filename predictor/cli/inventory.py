"""``predictor inventory``: the cluster inventory (GPU nodes, types, racks and blocks), read from the
cluster itself and written as the YAML the rules layer, the service and the generators load."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from features.errors import InputError
from predictor.adapters.discovery import DiscoveredNode, inventory_document, parse_type_overrides

ORDER = 72

GpuTypeOpt = Annotated[list[str] | None, typer.Option("--gpu-type", show_default=False, help=(
    "LABEL=TYPE: what a gres type or node label the vocabulary cannot place means (repeatable), "
    "e.g. --gpu-type a100=A100-80GB."))]
SlurmConfOpt = Annotated[Path | None, typer.Option("--slurm-conf", help="slurm.conf of the cluster (SLURM_CONF).",
                                                   show_default=False)]
TopologyOpt = Annotated[Path | None, typer.Option("--topology", show_default=False, help=(
    "--from-slurm: topology.conf or topology.yaml (default: the one beside slurm.conf, if any)."))]
RackLabelOpt = Annotated[str, typer.Option("--rack-label", help=(
    "--from-kubernetes: node label naming the rack, when the cluster has no Kueue Topology."))]
BlockLabelOpt = Annotated[str, typer.Option("--block-label", help="--from-kubernetes: node label naming the block.")]


def discover_nodes(target: str, *, slurm_conf: Path | None = None, topology: Path | None = None,
                   rack_label: str = "predictor/rack", block_label: str = "predictor/block",
                   kube_api_version: str = "v1beta2") -> list[DiscoveredNode]:
    """The nodes of the Slurm (``slurm``) or Kubernetes (``kueue``/``kubernetes``) cluster."""
    from predictor.adapters.base import SchedulerError

    try:
        if target == "slurm":
            from predictor.adapters.slurm.discovery import slurm_nodes, topology_file

            commands = slurm_commands(slurm_conf)
            return slurm_nodes(commands, topology_file(commands, topology))
        from predictor.adapters.kueue.discovery import kube_api_client, kubernetes_nodes
        from predictor.adapters.kueue.manifests import KueueNaming

        naming = KueueNaming(api_version=kube_api_version, rack_label=rack_label, block_label=block_label)
        return kubernetes_nodes(kube_api_client(), naming)
    except SchedulerError as exc:
        raise InputError(f"cannot read the {target} cluster: {exc}") from None


def slurm_commands(slurm_conf: Path | None):  # noqa: ANN201 - SlurmCommands, imported lazily
    from predictor.adapters.slurm.commands import SlurmCommands

    if slurm_conf is not None and not slurm_conf.is_file():
        raise InputError(f"--slurm-conf: {slurm_conf} does not exist")
    return SlurmCommands(env={"SLURM_CONF": str(slurm_conf)} if slurm_conf else {})


def write_yaml(path: Path, doc: dict[str, Any], header: str, *, force: bool) -> None:
    """``doc`` as YAML under a ``#`` header, written atomically; an existing file only with ``force``."""
    if path.exists() and not force:
        raise InputError(f"{path} exists; pass --force to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    tmp.write_text(text + yaml.safe_dump(doc, sort_keys=False))
    tmp.replace(path)


def register(app: typer.Typer) -> None:
    @app.command("inventory")
    def inventory_cmd(
        out: Annotated[Path, typer.Option("--out", "-o", help="Inventory YAML to write.", show_default=False)],
        from_slurm: Annotated[bool, typer.Option("--from-slurm", help="Read scontrol show nodes and topology.conf.")] = False,
        from_kubernetes: Annotated[bool, typer.Option("--from-kubernetes", help=(
            "Read the nodes' GPU labels through the Kubernetes API (kubeconfig or in-cluster)."))] = False,
        gpu_type: GpuTypeOpt = None,
        slurm_conf: SlurmConfOpt = None,
        topology: TopologyOpt = None,
        rack_label: RackLabelOpt = "predictor/rack",
        block_label: BlockLabelOpt = "predictor/block",
        kube_api_version: Annotated[str, typer.Option("--kueue-api-version", help="v1beta2 or v1beta1.")] = "v1beta2",
        force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
    ) -> None:
        """Write the cluster's inventory: GPU nodes with their type (through the GPU type vocabulary),
        count, CPUs, memory, rack and block.

        Example: predictor inventory --from-slurm --out inventory.yaml
        """
        if from_slurm == from_kubernetes:
            raise InputError("give one of --from-slurm and --from-kubernetes")
        target = "slurm" if from_slurm else "kubernetes"
        nodes = discover_nodes(target, slurm_conf=slurm_conf, topology=topology, rack_label=rack_label,
                               block_label=block_label, kube_api_version=kube_api_version)
        doc = inventory_document(nodes, overrides=parse_type_overrides(gpu_type), origin=target)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_yaml(out, doc, f"Inventory read from {target} by `predictor inventory` at {stamp}.\n"
                   "Edit nvlink_islands / numa_of_gpu where the cluster knows more than it says.", force=force)
        gpus = sum(n.get("gpus", 0) for n in doc["nodes"])
        typer.echo(f"wrote {out}: {len(doc['nodes'])} nodes, {gpus} GPUs of {len(doc['gpu_types'])} type(s) "
                   f"({', '.join(doc['gpu_types']) or '-'})")
