"""``predictor doctor``: read the live Slurm or Kueue configuration and the policy, and list every
finding with its severity, the evidence and the command that fixes it (docs/adapters.md#doctor).

Exit status: 0 clean, 1 warnings only, 2 errors (or bad input: one line saying what is wrong).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from features.errors import InputError

ORDER = 77


class Target(StrEnum):
    slurm = "slurm"
    kueue = "kueue"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _read_picture(target: Target, recorded: Path | None, slurm_conf: Path | None, gres_conf: Path | None,
                  api_version: str, flavor_label: str, local_queue: str):  # noqa: ANN202 - one of two pictures
    from predictor.adapters.base import SchedulerError
    from predictor.adapters.doctor import KueuePicture, SlurmPicture, read_kueue_picture, read_slurm_picture

    kind = SlurmPicture if target is Target.slurm else KueuePicture
    if recorded is not None:
        if not recorded.is_file():
            raise InputError(f"--picture: {recorded} does not exist")
        try:
            return kind.from_json(recorded.read_text())
        except ValueError as exc:
            first = str(exc).splitlines()[0]
            raise InputError(f"--picture: {recorded} is not a recorded {target.value} picture ({first})") from None
    try:
        if target is Target.slurm:
            from predictor.cli.inventory import slurm_commands

            if gres_conf is not None and not gres_conf.is_file():
                raise InputError(f"--gres-conf: {gres_conf} does not exist")
            return read_slurm_picture(slurm_commands(slurm_conf), gres_conf)
        from predictor.adapters.kueue.discovery import kube_api_client
        from predictor.adapters.kueue.manifests import KueueNaming

        naming = KueueNaming(api_version=api_version, flavor_label=flavor_label, local_queue=local_queue)
        return read_kueue_picture(kube_api_client(), naming)
    except SchedulerError as exc:
        raise InputError(f"cannot read the {target.value} cluster: {exc}") from None


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor_cmd(
        target: Annotated[Target, typer.Option("--target", help="The scheduler to examine.", show_default=False)],
        policy: Annotated[Path | None, typer.Option("--policy", help="Policy file (default: shipped).")] = None,
        inventory: Annotated[str | None, typer.Option("--inventory", show_default=False, help=(
            "The inventory the rules layer plans with: compared with the nodes, and its GPU types and aliases "
            "join the vocabulary."))] = None,
        jobs: Annotated[Path | None, typer.Option("--jobs", show_default=False, help=(
            "Job history (canonical table, .parquet/.csv): quotas must admit each team's largest job; gres "
            "types should be asked for."))] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
        slurm_conf: Annotated[Path | None, typer.Option("--slurm-conf", help="slurm.conf of the cluster (SLURM_CONF).",
                                                        show_default=False)] = None,
        gres_conf: Annotated[Path | None, typer.Option("--gres-conf", show_default=False, help=(
            "gres.conf to check (default: the one beside slurm.conf)."))] = None,
        api_version: Annotated[str, typer.Option("--kueue-api-version", help="v1beta2 or v1beta1.")] = "v1beta2",
        flavor_label: Annotated[str, typer.Option("--flavor-label", help=(
            "Node label the fixes give nodes to select them by flavor."))] = "predictor/gpu-type",
        local_queue: Annotated[str, typer.Option("--local-queue", help=(
            "LocalQueue name the fixes use in a team's namespace."))] = "gpus",
        save_picture: Annotated[Path | None, typer.Option("--save-picture", show_default=False, help=(
            "Also write what was read from the cluster as JSON (check it later with --picture)."))] = None,
        picture: Annotated[Path | None, typer.Option("--picture", show_default=False, help=(
            "Check a recorded picture (from --save-picture) instead of reading the cluster."))] = None,
    ) -> None:
        """List what is set up wrong on the cluster against the policy, each with its fix.

        Example: predictor doctor --target slurm --policy site.yaml --jobs history.parquet
        """
        from predictor.adapters.doctor import (
            diagnose_kueue,
            diagnose_slurm,
            load_expectations,
            render_json,
            render_table,
        )

        expect = load_expectations(policy, inventory, jobs)
        pic = _read_picture(target, picture, slurm_conf, gres_conf, api_version, flavor_label, local_queue)
        if save_picture is not None:
            _write_atomic(save_picture, pic.to_json())
        report = diagnose_slurm(pic, expect) if target is Target.slurm else diagnose_kueue(pic, expect)
        if as_json:
            typer.echo(render_json(report))
        else:
            render_table(report, Console(soft_wrap=False))
        raise typer.Exit(report.exit_status)
