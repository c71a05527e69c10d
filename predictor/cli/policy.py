"""``predictor policy``: show and validate policy files, size a job, run one scheduling cycle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.table import Table

from features.job_tables import read_job_table
from features.schema import conform

ORDER = 40

_FILE = typer.Argument(show_default=False, help="Policy YAML file (default: the shipped default policy).")
_PRESET = typer.Option("--preset", "-p", help="Overlay a preset: fifo, sjf-oracle, qssf, las, kueue, ours.")


def _load(path: Path | None, preset: str | None):
    from predictor.policy.presets import load_policy

    return load_policy(path, preset=preset)


def priority_ranges(policy) -> dict:
    """The integer ranges a policy's priorities occupy, for Slurm (uint32) and Kueue (int32)."""
    from predictor.policy.decision import KUEUE_PRIORITY_MAX, SLURM_PRIORITY_MAX
    from predictor.policy.ordering import GUARD_BASE, NORMAL_MAX

    out = {
        "slurm_priority": {"normal": [1, NORMAL_MAX], "starvation_guard": [GUARD_BASE, SLURM_PRIORITY_MAX]},
        "kueue_workload_priority": {"normal": [0, NORMAL_MAX // 2],
                                    "starvation_guard": [GUARD_BASE // 2, KUEUE_PRIORITY_MAX]},
        "mapping": "kueue = slurm // 2",
    }
    if policy.ordering == "multifactor":
        out["formula"] = ("priority = 1 + floor(sum(weight x factor) / " f"{policy.total_weight:g} x (2^31 - 2))")
    if policy.ordering == "kueue":
        out["priority_classes"] = {name: t.kueue_priority for name, t in policy.tiers.items()}
        out["formula"] = "priority = 2 x class value + 1 (kueue_priority = class value)"
    if policy.aging.starvation_after_s is None:
        out["slurm_priority"].pop("starvation_guard")
        out["kueue_workload_priority"].pop("starvation_guard")
    return out


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Scheduling policy: show, validate, size a job, decide one cycle.",
                        no_args_is_help=True)
    app.add_typer(group, name="policy")

    @group.command("show")
    def show_cmd(
        path: Annotated[Path | None, _FILE] = None,
        preset: Annotated[str | None, _PRESET] = None,
        as_json: Annotated[bool, typer.Option("--json", help="JSON instead of YAML.")] = False,
    ) -> None:
        """Print the effective policy (file plus defaults plus preset) and its priority ranges.

        Example: predictor policy show site.yaml --preset kueue
        """
        policy = _load(path, preset)
        doc = {"policy": policy.model_dump(mode="json"), "priority_ranges": priority_ranges(policy)}
        if as_json:
            typer.echo(json.dumps(doc, indent=2))
        else:
            typer.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)

    @group.command("validate")
    def validate_cmd(
        path: Annotated[Path, typer.Argument(show_default=False, help="Policy YAML file to check.")],
        preset: Annotated[str | None, _PRESET] = None,
    ) -> None:
        """Check a policy file; print a one-line summary, or the problems (exit 2).

        Example: predictor policy validate site.yaml
        """
        p = _load(path, preset)
        weights = ", ".join(f"{k} {w:g}" for k, w in p.weights.items() if w > 0)
        typer.echo(f"{path}: valid policy {p.name!r}: ordering {p.ordering}"
                   + (f" ({weights})" if p.ordering == "multifactor" else "")
                   + f"; {len(p.tiers)} tiers, {len(p.teams)} teams; reservations {p.reservation.depth}; "
                   f"preemption {'on' if p.preemption.enabled else 'off'}")

    @group.command("presets")
    def presets_cmd() -> None:
        """List the named presets (comparison policies for replays).

        Example: predictor policy presets
        """
        from predictor.policy.presets import preset_names

        for name in preset_names():
            p = _load(None, name)
            typer.echo(f"{name:<11} {p.description or 'the full rules layer with the policy file settings'}")

    @group.command("size")
    def size_cmd(
        cluster: Annotated[str, typer.Option("--cluster", help="Inventory file or GPU count.")],
        gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs requested.")] = 1,
        share: Annotated[int, typer.Option("--milli", min=1, max=1000, help="Share of each GPU (1000 = whole).")
                         ] = 1000,
        peak_mib: Annotated[float | None, typer.Option("--peak-mib", help="Predicted peak memory upper bound per GPU.")
                            ] = None,
        gpu_type: Annotated[list[str] | None, typer.Option("--type", help="Requested GPU type (repeat).")] = None,
        path: Annotated[Path | None, typer.Option("--policy", help="Policy file (sizing margins).")] = None,
    ) -> None:
        """Pick the GPU flavor for a job from its predicted peak memory, with warnings (exit 1 when it
        cannot run on this cluster). GPU types may be spelt as sacct, Kubernetes or the inventory spell them.

        Example: predictor policy size --cluster data/inventory/example-cluster.yaml --peak-mib 30000 --type A10
        """
        from predictor.capacity.inventory_sources import load_inventory
        from predictor.capacity.layout import ClusterLayout
        from predictor.capacity.sizing import size_request

        layout = ClusterLayout.of(load_inventory(cluster))
        advice = size_request(layout, _load(path, None).sizing, num_gpus=gpus, gpu_milli=share,
                              peak_upper_mib=peak_mib, requested=tuple(gpu_type or ()))
        typer.echo(f"flavor: {advice.flavor or '(none: cannot run here)'} x {advice.num_gpus}")
        typer.echo(f"allowed: {', '.join(advice.allowed) or '(none)'}")
        if advice.need_mib is not None:
            typer.echo(f"memory needed per GPU: {advice.need_mib:,.0f} MiB")
        for w in advice.warnings:
            typer.echo(f"warning: {w}")
        if advice.flavor is None:
            raise typer.Exit(1)

    @group.command("decide")
    def decide_cmd(
        jobs: Annotated[Path, typer.Option("--jobs", help="Canonical job table (.parquet/.csv): PENDING rows "
                                           "queue, RUNNING rows hold GPUs (on their `nodes` where given).")],
        cluster: Annotated[str, typer.Option("--cluster", help="Inventory file or GPU count.")],
        path: Annotated[Path | None, typer.Option("--policy", help="Policy YAML file.")] = None,
        preset: Annotated[str | None, _PRESET] = None,
        predictions: Annotated[Path | None, typer.Option("--predictions", help="PREDICTION_COLUMNS table.")] = None,
        model: Annotated[str, typer.Option("--model", help=(
            "What predicts: none (the rules layer alone; the default unless --predictions), fallback (the "
            "analytic fallback), or a registry URI such as models:/job-predictor@champion (MLFLOW_TRACKING_URI)."))
        ] = "none",
        now: Annotated[float | None, typer.Option("--now", help="Clock (epoch s); default: latest submit time.")
                       ] = None,
        limit: Annotated[int, typer.Option("--limit", min=1, help="Rows to print.")] = 30,
        as_json: Annotated[bool, typer.Option("--json", help="Every Decision as JSON lines.")] = False,
    ) -> None:
        """Run one scheduling cycle on a job table and print the ordered decisions with their reasons.

        The same cycle ``predictor sync`` and the service run (``Engine.decide_cluster``).

        Example: predictor policy decide --jobs queue.csv --cluster data/inventory/example-cluster.yaml
        """
        from dataclasses import asdict

        from predictor.capacity.inventory_sources import load_inventory
        from predictor.engine.engine import Engine

        frame = conform(read_job_table(jobs, "--jobs"))
        state = frame["state"].astype("string").fillna("PENDING")
        pending, running = frame.loc[state == "PENDING"], frame.loc[state == "RUNNING"]
        clock = float(now) if now is not None else float(frame["submit_ts"].max())
        engine = Engine(model=_model_slot(model, predictions), policy=_load(path, preset),
                        inventory=load_inventory(cluster))
        result = engine.decide_cluster(pending, running, clock)
        queue = result.plan.queue()
        if as_json:
            for d in queue:
                row = asdict(d)
                row["kueue_priority"] = d.kueue_priority
                typer.echo(json.dumps(row, default=str))
            return
        why = f" (fallback: {result.model.fallback_reason})" if result.model.fallback else ""
        table = Table(title=f"{len(queue)} pending, {len(result.picture.running)} running at {clock:.0f}; "
                            f"model {result.model.version}{why}")
        for col in ("job", "action", "priority", "tier", "GPUs", "where / when", "reason"):
            table.add_column(col, overflow="fold")
        for d in queue[:limit]:
            where = ""
            if d.placement is not None:
                where = f"{d.placement.placement_class} {','.join(n for n, _ in d.placement.gpus_by_node)}"
            elif d.reservation is not None:
                where = f"reserved +{d.reservation.start_ts - clock:.0f}s"
            table.add_row(d.job_id, d.action, f"{d.priority:,}", d.tier, f"{d.num_gpus} {d.flavor or ''}", where,
                          d.reason)
        Console().print(table)
        if result.unplaced:
            typer.echo(f"{len(result.unplaced)} running job(s) hold no GPU of the inventory: "
                       + ", ".join(result.unplaced[:10]), err=True)


def _model_slot(model: str, predictions: Path | None):
    """The model slot ``policy decide`` predicts with (see its ``--model``)."""
    from models.fixed import NULL_VERSION, NullPredictor, TablePredictor
    from predictor.engine.model_slot import ModelSlot

    if predictions is not None:
        return ModelSlot.fixed(TablePredictor(read_job_table(predictions, "--predictions"), version="table",
                                              origin=str(predictions)), "table")
    if model == "none":
        return ModelSlot.fixed(NullPredictor(), NULL_VERSION, fallback_reason="rules only (--model none)")
    if model == "fallback":
        from models.fallback import FallbackPredictor

        return ModelSlot.fixed(FallbackPredictor(), "fallback", fallback_reason="asked for (--model fallback)")
    from predictor.engine.wiring import get_engine_settings, registry_model_slot

    slot = registry_model_slot(get_engine_settings().model_copy(update={"model_uri": model}))
    slot.check_once(warmup="skip")  # one decision: LightGBM costs less than compiling
    return slot
