"""``predictor init``: a starting site read from the cluster: ``policy.yaml`` (its teams, its QoS or
PriorityClasses mapped to the policy's tiers) and ``inventory.yaml``, in one folder, so that
``predictor kueue manifests`` / ``predictor slurm config`` and the service run from there."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from features.errors import InputError
from predictor.adapters.discovery import (
    inventory_document,
    parse_type_overrides,
    site_policy_document,
    tier_aliases_for,
)
from predictor.cli.inventory import (
    BlockLabelOpt,
    GpuTypeOpt,
    RackLabelOpt,
    SlurmConfOpt,
    TopologyOpt,
    discover_nodes,
    slurm_commands,
    write_yaml,
)

ORDER = 71


def _teams_and_classes(target: str, slurm_conf: Path | None, api_version: str):  # noqa: ANN202
    from predictor.adapters.base import SchedulerError

    try:
        if target == "slurm":
            from predictor.adapters.slurm.discovery import slurm_accounts, slurm_qos

            commands = slurm_commands(slurm_conf)
            return slurm_accounts(commands), slurm_qos(commands)
        from predictor.adapters.kueue.discovery import kube_api_client, kueue_teams, priority_classes

        api = kube_api_client()
        return kueue_teams(api, api_version), priority_classes(api, api_version)
    except SchedulerError as exc:
        raise InputError(f"cannot read the {target} cluster: {exc}") from None


def register(app: typer.Typer) -> None:
    @app.command("init")
    def init_cmd(
        target: Annotated[str, typer.Option("--target", help="slurm or kueue.", show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", help="Folder for policy.yaml and inventory.yaml.")] = Path("."),
        name: Annotated[str | None, typer.Option("--name", help="Policy name (default: the folder's name).",
                                                 show_default=False)] = None,
        team: Annotated[list[str] | None, typer.Option("--team", show_default=False, help=(
            "A team the cluster does not list (repeatable); with none found, at least one is needed."))] = None,
        gpu_type: GpuTypeOpt = None,
        slurm_conf: SlurmConfOpt = None,
        topology: TopologyOpt = None,
        rack_label: RackLabelOpt = "predictor/rack",
        block_label: BlockLabelOpt = "predictor/block",
        kube_api_version: Annotated[str, typer.Option("--kueue-api-version", help="v1beta2 or v1beta1.")] = "v1beta2",
        force: Annotated[bool, typer.Option("--force", help="Replace policy.yaml / inventory.yaml if they exist.")] = False,
    ) -> None:
        """Write policy.yaml (teams: Slurm accounts or namespaces with LocalQueues; tiers mapped to the
        cluster's QoS or PriorityClasses) and inventory.yaml, read from the cluster.

        Example: predictor init --target slurm --out site/

        Then, from site/: predictor slurm config --policy policy.yaml
        """
        from predictor.policy.presets import load_policy

        if target not in ("slurm", "kueue"):
            raise InputError(f"--target must be slurm or kueue, got {target!r}")
        out = out.resolve()
        for path in (out / "policy.yaml", out / "inventory.yaml"):
            if path.exists() and not force:
                raise InputError(f"{path} exists; pass --force to replace it")
        source = "slurm" if target == "slurm" else "kubernetes"
        nodes = discover_nodes(source, slurm_conf=slurm_conf, topology=topology, rack_label=rack_label,
                               block_label=block_label, kube_api_version=kube_api_version)
        inventory = inventory_document(nodes, overrides=parse_type_overrides(gpu_type), origin=source)
        teams, classes = _teams_and_classes(target, slurm_conf, kube_api_version)
        for extra in team or ():
            teams.setdefault(extra, 1.0)
        default = load_policy(None)
        tiers = sorted(default.tiers, key=lambda t: -default.tiers[t].rank)
        aliases = {**default.tier_aliases, **tier_aliases_for(classes, tiers, default.tier_aliases)}
        policy = site_policy_document(name or out.name or "site", teams, aliases)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        mapped = ", ".join(f"{c.name} -> {aliases.get(c.name, c.name)}" for c in classes) or "none found"
        write_yaml(out / "inventory.yaml", inventory, f"Inventory read from {source} by `predictor init` at {stamp}.",
                   force=True)
        write_yaml(out / "policy.yaml", policy,
                   f"Site policy written by `predictor init --target {target}` at {stamp}.\n"
                   f"Teams: the cluster's {'accounts' if target == 'slurm' else 'namespaces with LocalQueues'}; "
                   f"priority classes -> tiers: {mapped}.\n"
                   "Everything not set here takes the shipped default (`predictor policy show policy.yaml`).",
                   force=True)
        load_policy(out / "policy.yaml")  # what every command will load: refuse to leave a bad one
        typer.echo(f"wrote {out / 'policy.yaml'} ({len(teams)} teams) and {out / 'inventory.yaml'} "
                   f"({len(inventory['nodes'])} nodes)")
        if target == "kueue":
            typer.echo(f"next: predictor kueue manifests --policy {out / 'policy.yaml'} "
                       f"--inventory {out / 'inventory.yaml'} --out {out / 'kueue'}")
        else:
            typer.echo(f"next: predictor slurm config --policy {out / 'policy.yaml'} --out {out / 'slurm'}")
