"""``predictor tune``: search the policy's settings by replaying the user's own history, on Dask."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from features.errors import InputError
from predictor.cli.simulate import parse_inventory, read_jobs

ORDER = 52
_out = Console(stderr=True)


def register(app: typer.Typer) -> None:
    @app.command("tune")
    def tune(
        jobs: Annotated[Path, typer.Option("--jobs", help="canonical job table (.parquet or .csv)")],
        cluster: Annotated[str, typer.Option("--cluster", help="GPU count (8-GPU nodes) or inventory file")],
        out: Annotated[Path, typer.Option("--out", help="folder for policy.yaml, report.json, report.html...")],
        trials: Annotated[int, typer.Option("--trials", help="trials (policies replayed on the tuning window)")] = 50,
        workers: Annotated[int | None, typer.Option("--workers", help=(
            "worker processes of the local Dask cluster (default: one per CPU core)"))] = None,
        dask_scheduler: Annotated[str | None, typer.Option("--dask-scheduler", help=(
            "address of an existing Dask scheduler (tcp://HOST:8786) instead of a local cluster"))] = None,
        objective: Annotated[str, typer.Option("--objective", help=(
            "comma-separated report.json metrics to optimise"))] = "avg_jct_s,max_wait_s,sla_misses,jain_index",
        seed: Annotated[int, typer.Option("--seed", help="sampler seed: same seed, same trials and front")] = 0,
        population: Annotated[int, typer.Option("--population", help=(
            "trials per generation (NSGA-II's population; also TPE's batch)"))] = 16,
        sampler: Annotated[str, typer.Option("--sampler", help="nsga2 or tpe (multi-objective TPE)")] = "nsga2",
        policy_file: Annotated[Path | None, typer.Option(help=(
            "base policy YAML (tiers, teams, switches); trials change only the searched settings"))] = None,
        train_fraction: Annotated[float, typer.Option(help="first share of jobs (by submit time): trains the predictor")] = 0.3,
        validate_fraction: Annotated[float, typer.Option(help="last share of jobs: validates, never seen by a trial")] = 0.3,
        starvation_hours: Annotated[float, typer.Option(help="a job waiting longer counts as starved")] = 24.0,
        fairness_window_s: Annotated[float, typer.Option(help="window of the per-team share / Jain index")] = 3600.0,
        default_checkpoint_s: Annotated[float, typer.Option(help="checkpoint interval of jobs that do not say")] = 3600.0,
        cycle_s: Annotated[float | None, typer.Option(help="scheduler cycle of the replay (see simulate)")] = None,
        parts: Annotated[int, typer.Option("--parts", help=(
            "the chosen point must also be no worse than qssf (qssf-sized on a cluster of several GPU types) "
            "on each of this many consecutive parts of "
            "the tuning window (0: the whole window only)"))] = 2,
        min_margin: Annotated[float, typer.Option("--min-margin", help=(
            "smallest margin over qssf (worst relative gain of the four metrics) for which a searched point "
            "is chosen; otherwise the chosen policy is qssf itself"))] = 0.01,
        mlflow: Annotated[bool, typer.Option("--mlflow/--no-mlflow", help=(
            "log the study to MLflow (MLFLOW_TRACKING_URI, else ./mlflow.db)"))] = True,
        experiment: Annotated[str, typer.Option("--experiment", help="MLflow experiment name")] = "policy-tuning",
    ) -> None:
        """Search the policy's weights, caps, guard depth, shortness scale, preemption thresholds and
        scheduling depth by replaying your history; write the chosen policy and the report.

        Example: predictor tune --jobs jobs.parquet --cluster inventory.yaml --trials 50 --out tuned/
        """
        from predictor.sim.metrics import MetricsConfig
        from predictor.sim.replay import SimConfig
        from predictor.tune.dask_replays import dask_client
        from predictor.tune.objectives import parse_objectives
        from predictor.tune.search import SAMPLERS
        from predictor.tune.study import TuneSettings, tune_policy
        from predictor.tune.windows import check_fractions

        # everything a user can get wrong is checked before the predictor is trained or a worker started
        objectives = parse_objectives(objective)
        if trials < 1:
            raise InputError(f"--trials must be at least 1, got {trials}")
        if population < 2:
            raise InputError(f"--population must be at least 2, got {population}")
        if sampler not in SAMPLERS:
            raise InputError(f"--sampler: unknown sampler {sampler!r}; choose {' or '.join(SAMPLERS)}")
        if workers is not None and dask_scheduler is not None:
            raise InputError("give --workers or --dask-scheduler, not both")
        if workers is not None and workers < 1:
            raise InputError(f"--workers must be at least 1, got {workers}")
        check_fractions(train_fraction, validate_fraction)
        if starvation_hours <= 0 or fairness_window_s <= 0 or default_checkpoint_s <= 0:
            raise InputError("--starvation-hours, --fairness-window-s and --default-checkpoint-s must be positive")
        if parts < 0:
            raise InputError(f"--parts must be 0 or more, got {parts}")
        if not 0.0 <= min_margin < 1.0:
            raise InputError(f"--min-margin must be in [0, 1), got {min_margin}")
        if cycle_s is not None and not cycle_s > 0:
            raise InputError(f"--cycle-s must be positive, got {cycle_s}")
        if policy_file is not None:
            from predictor.policy.presets import load_policy

            load_policy(policy_file)
        inventory = parse_inventory(cluster)
        frame, rejects = read_jobs(jobs)
        if len(frame) == 0:
            raise InputError(f"{jobs}: every row was rejected ({rejects['reject_reason'].value_counts().to_dict()})")
        settings = TuneSettings(
            trials=trials, objectives=objectives, seed=seed, population=population, sampler=sampler,
            train_fraction=train_fraction, validate_fraction=validate_fraction, parts=parts,
            min_margin=min_margin,
            sim=SimConfig(default_checkpoint_s=default_checkpoint_s, cycle_s=cycle_s),
            metrics=MetricsConfig(starvation_s=starvation_hours * 3600.0, fairness_window_s=fairness_window_s))
        run = {"jobs_file": str(jobs), "cluster": cluster, "policy_file": None if policy_file is None else str(policy_file),
               "rows_rejected_by_validation": int(len(rejects)),
               "dask": dask_scheduler or f"LocalCluster ({workers or 'one per core'} worker processes)"}
        tracker = None
        if mlflow:
            from predictor.tune.tracking import StudyTracker

            tracker = StudyTracker(experiment, f"tune-seed{seed}-{trials}trials", {
                **run, "trials": trials, "seed": seed, "population": population, "sampler": sampler,
                "objectives": objective, "train_fraction": train_fraction, "validate_fraction": validate_fraction})
        done = [0]

        def generation(records) -> None:
            done[0] += len(records)
            ok = [r for r in records if r.ok]
            best = min((r.metrics["avg_jct_s"] for r in ok if r.metrics.get("avg_jct_s") is not None), default=None)
            _out.print(f"[dim]trials {done[0]}/{trials}: generation of {len(records)} done"
                       + (f", best avg JCT in it {best:,.0f} s" if best is not None else "")
                       + (f", {len(records) - len(ok)} failed" if len(ok) < len(records) else "") + "[/]")
            if tracker is not None:
                tracker.trials(records)

        try:
            with dask_client(workers, dask_scheduler) as client:
                result = tune_policy(frame, inventory, client, settings,
                                     policy_file=None if policy_file is None else str(policy_file),
                                     on_phase=lambda msg: _out.print(f"[dim]{msg}[/]"), on_generation=generation)
            from predictor.tune.report import write_outputs

            paths = write_outputs(result, out, inventory, run)
            if len(rejects):
                rejects.to_csv(out / "rejects.csv", index=False)
        except BaseException:
            if tracker is not None:
                tracker.fail()
            raise
        if tracker is not None:
            tracker.finish(result, paths)
        _print(result)
        typer.echo(f"wrote {', '.join(str(p) for p in paths)}")


def _print(result) -> None:
    from rich.table import Table

    from predictor.tune.study import judge_sizing

    console = Console()
    console.print(f"rule: {result.choice.rule}")
    judge = result.judge
    if result.choice.base:
        _out.print(f"[bold yellow]note:[/] no front point beat {judge} clearly, and {judge} lost many more jobs to "
                   "out-of-memory failures than the base policy on the tuning window: the chosen policy is the base policy")
    if result.choice.baseline:
        _out.print(f"[bold yellow]note:[/] no front point beat {judge} on avg JCT, max wait, SLA misses and Jain's index "
                   f"throughout the tuning window by the minimum margin: the chosen policy is {judge} itself")
        console.print(f"chosen: {judge} (smallest predicted GPU-time first{judge_sizing(judge)}) with the base policy's "
                      "tiers and teams")
    else:
        console.print(f"chosen: {result.chosen_label}: "
                      + ", ".join(f"{k}={v:.4g}" for k, v in result.chosen.params.items()))
    table = Table(title=f"validation window ({result.split.validate_jobs:,} jobs never seen by a trial)")
    cols = {"avg_jct_s": "avg JCT", "p95_jct_s": "p95 JCT", "max_wait_s": "max wait", "sla_misses": "SLA miss",
            "jain_index": "Jain", "utilization": "util", "preemptions": "preempt", "jobs_failed_oom": "OOM-failed"}
    table.add_column("policy", no_wrap=True)
    for label in cols.values():
        table.add_column(label, justify="right")
    for name, m in result.validation.items():
        table.add_row(name, *("-" if m.get(c) is None else _cell(c, m[c]) for c in cols))
    console.print(table)
    _warn_losses(result)


def _warn_losses(result) -> None:
    """When the chosen policy is QSSF itself and it lost more validation jobs out of memory than ``ours``."""
    if not result.choice.baseline:
        return
    q, ours = (result.validation.get(n, {}).get("jobs_failed_oom") for n in (result.judge, "ours"))
    if q is not None and ours is not None and q > ours:
        why = "it sizes nothing by memory, and " if result.judge == "qssf" else ""
        _out.print(f"[bold yellow]warning:[/] {result.judge}, the chosen policy, lost {q:,.0f} of the validation window's jobs to "
                   f"out-of-memory failures against {ours:,.0f} for the base policy (ours): {why}the jobs it loses "
                   "shorten its JCTs. Compare the two rows above before you deploy policy.yaml "
                   "(docs/tuning.md, No more jobs lost).")


#: Counts: printed whole (an SLA miss is not 3.000).
_COUNTS = frozenset({"sla_misses", "preemptions", "jobs_failed_oom", "starved_jobs"})


def _cell(metric: str, value: float) -> str:
    if metric in _COUNTS:
        return f"{value:,.0f}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:,.0f}"
