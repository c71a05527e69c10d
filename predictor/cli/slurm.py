"""``predictor slurm``: Slurm configuration mirroring the policy file and the node agent's topologies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from predictor.adapters.cluster_policy import load_cluster_policy
from predictor.adapters.slurm.config import (
    account_commands,
    priority_weight_lines,
    qos_commands,
    render_commands,
)
from predictor.nodeinfo.pinning import plan_pinning
from predictor.nodeinfo.records import load_topology

ORDER = 76


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def register(app: typer.Typer) -> None:
    slurm = typer.Typer(help="Slurm configuration mirroring the policy file.", no_args_is_help=True)
    app.add_typer(slurm, name="slurm")

    @slurm.command("config")
    def config_cmd(
        policy: Annotated[Path | None, typer.Option("--policy", help="Policy file (default: shipped).")] = None,
        topology: Annotated[list[Path] | None, typer.Option(
            "--topology", help="Node topology from `predictor node-info --json` (repeatable): adds gres.conf lines.")] = None,
        node_name: Annotated[list[str] | None, typer.Option(
            "--node-name", help="Slurm NodeName for each --topology, in order (default: its hostname).")] = None,
        reserve_cores: Annotated[int, typer.Option(help="Cores per socket left to the system (CpuSpecList).")] = 2,
        cluster: Annotated[str | None, typer.Option(help="Slurm cluster name for the sacctmgr account lines.")] = None,
        out: Annotated[Path | None, typer.Option(help="Write slurm-priority.conf, sacctmgr.sh, gres.conf here.")] = None,
    ) -> None:
        """Print PriorityWeight* lines, sacctmgr QoS/account commands and gres.conf lines with Cores=.

        Example: predictor slurm config --policy policy.yaml --topology dgx-01.json --node-name dgx-01 --out slurm/
        """
        pol = load_cluster_policy(policy)
        priority = "\n".join(priority_weight_lines(pol)) + "\n"
        script = ("#!/bin/sh\n# QoS per tier, fair-share and GPU caps per team (policy "
                  f"{pol.name!r}).\n" + render_commands(qos_commands(pol) + account_commands(pol, cluster)))
        names = list(node_name or [])
        gres, nodes = [], []
        for k, path in enumerate(topology or []):
            plan = plan_pinning(load_topology(path), reserve_cores)
            name = names[k] if k < len(names) else None
            gres += plan.gres_conf_lines(name)
            nodes.append(plan.slurm_node_line(name))
        gres_text = "\n".join(gres) + "\n" if gres else ""
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            files = {"slurm-priority.conf": priority + ("\n".join(nodes) + "\n" if nodes else ""),
                     "sacctmgr.sh": script}
            if gres_text:
                files["gres.conf"] = gres_text
            for name, text in files.items():
                _write_atomic(out / name, text)
                typer.echo(f"wrote {out / name}")
            (out / "sacctmgr.sh").chmod(0o755)
            return
        typer.echo("# --- slurm.conf ---\n" + priority + ("\n".join(nodes) + "\n" if nodes else ""))
        typer.echo("# --- sacctmgr (run once, as a Slurm administrator) ---\n" + script)
        if gres_text:
            typer.echo("# --- gres.conf ---\n" + gres_text)
