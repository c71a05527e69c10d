"""``predictor simulate``: replay a job history under several policies and write the comparison."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console

from features.errors import InputError
from features.outputs import check_output_folder, output_errors, write_atomic

ORDER = 50
_out = Console(stderr=True)


def read_jobs(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a canonical job table (Parquet, or CSV with canonical column names) and validate it.

    Returns
    -------
    (jobs, rejects)
        Valid rows (ground-truth extras kept) and rejected rows with a ``reject_reason``.
    """
    from features.schema import validate

    if not path.exists():
        raise InputError(f"job table {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        elif suffix in (".csv", ".gz"):
            frame = pd.read_csv(path)
        else:
            raise InputError(f"{path}: expected a .parquet or .csv canonical job table (see `predictor ingest`)")
    except (OSError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{path}: cannot read the job table: {exc}") from exc
    if len(frame) == 0:
        raise InputError(f"{path}: the job table is empty: nothing to replay")
    missing = [c for c in ("job_id", "submit_ts", "num_gpus") if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: not a canonical job table, missing column(s) {', '.join(missing)}")
    result = validate(frame)
    return result.jobs, result.rejects


def parse_inventory(spec: str):
    """``INVENTORY``: a GPU count (a homogeneous cluster of 8-GPU nodes) or an inventory file."""
    from predictor.capacity.inventory import homogeneous_inventory

    text = spec.strip()
    if text.isdigit():
        gpus = int(text)
        if gpus <= 0:
            raise InputError(f"--cluster {spec}: a cluster needs at least one GPU")
        return homogeneous_inventory(gpus)
    path = Path(text)
    if not path.exists():
        raise InputError(f"--cluster {spec}: neither a GPU count nor an existing inventory file")
    from predictor.capacity.inventory_sources import load_inventory

    return load_inventory(path)


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate(
        jobs: Annotated[Path, typer.Option("--jobs", help="canonical job table (.parquet or .csv)")],
        cluster: Annotated[str, typer.Option("--cluster", help="GPU count (8-GPU nodes) or inventory file")],
        out: Annotated[Path, typer.Option("--out", help="folder for report.json and report.html (created if missing)")],
        policy: Annotated[list[str], typer.Option("--policy", help=(
            "policy to replay (repeat): fifo, sjf-oracle, qssf, las, kueue, ours, ours-oracle, "
            "or NAME=policy.yaml"))] = None,  # noqa: B008
        policy_file: Annotated[Path | None, typer.Option(help="base policy YAML (teams, tiers, weights)")] = None,
        train_fraction: Annotated[float, typer.Option(help="share of jobs (by submit time) kept for training")] = 0.3,
        retrain_days: Annotated[float | None, typer.Option(help="refit the trained predictor every K days")] = None,
        starvation_hours: Annotated[float, typer.Option(help="a job waiting longer counts as starved")] = 24.0,
        fairness_window_s: Annotated[float, typer.Option(help="window of the per-team share / Jain index")] = 3600.0,
        default_checkpoint_s: Annotated[float, typer.Option(help=(
            "checkpoint interval of jobs that do not say (inf: never)"))] = 3600.0,
        cycle_s: Annotated[float | None, typer.Option(help=(
            "also ask the rules layer every this many seconds while jobs queue (a scheduler cycle); "
            "default: only on events and the plan's revisit"))] = None,
        progress: Annotated[bool, typer.Option(help="show a progress bar per replay")] = True,
        workers: Annotated[int | None, typer.Option("--workers", help=(
            "replay the policies in parallel on a local Dask cluster of K worker processes"))] = None,
        dask_scheduler: Annotated[str | None, typer.Option("--dask-scheduler", help=(
            "replay the policies in parallel on an existing Dask scheduler (tcp://HOST:8786)"))] = None,
        start_estimates: Annotated[bool, typer.Option("--start-estimates", help=(
            "record each job's start estimate at submit and measure it against the replayed start "
            "(report.json extra.POLICY.start_estimate; replays in this process, plans at every arrival)"))] = False,
    ) -> None:
        """Replay a job history on an inventory under several policies; write report.json + report.html.

        Example: predictor simulate --jobs jobs.parquet --cluster 512 --policy fifo --policy ours --out out/
        """
        from predictor.sim.experiment import ExperimentConfig, run_experiment
        from predictor.sim.metrics import MetricsConfig
        from predictor.sim.replay import SimConfig
        from predictor.sim.report import write_report

        names = list(policy or [])
        if not names:
            raise InputError("name at least one --policy (fifo, sjf-oracle, qssf, las, kueue, ours, ours-oracle)")
        if starvation_hours <= 0 or fairness_window_s <= 0 or default_checkpoint_s <= 0:
            raise InputError("--starvation-hours, --fairness-window-s and --default-checkpoint-s must be positive")
        if cycle_s is not None and not cycle_s > 0:
            raise InputError(f"--cycle-s must be positive, got {cycle_s}")
        # every input is checked before any training or replay: a bad one fails at once
        check_output_folder(out)
        inventory = parse_inventory(cluster)
        check_policies(names, policy_file)
        frame, rejects = read_jobs(jobs)
        if len(frame) == 0:
            raise InputError(f"{jobs}: every row was rejected ({rejects['reject_reason'].value_counts().to_dict()})")
        config = ExperimentConfig(
            train_fraction=train_fraction,
            retrain_every_s=None if retrain_days is None else retrain_days * 86400.0,
            sim=SimConfig(default_checkpoint_s=default_checkpoint_s, show_progress=progress, cycle_s=cycle_s),
            metrics=MetricsConfig(starvation_s=starvation_hours * 3600.0, fairness_window_s=fairness_window_s),
        )
        if start_estimates and (workers is not None or dask_scheduler is not None):
            raise InputError("--start-estimates replays in this process: drop --workers / --dask-scheduler")
        estimating = None
        if start_estimates:
            from predictor.sim.start_estimates import replay_with_estimates

            estimating = replay_with_estimates()
        with _replay_many(workers, dask_scheduler) if estimating is None else nullcontext(estimating) as replay_many:
            records, run = run_experiment(frame, inventory, names, config,
                                          policy_file=None if policy_file is None else str(policy_file),
                                          on_phase=lambda msg: _out.print(f"[dim]{msg}[/]"), replay_many=replay_many)
        run = {"jobs_file": str(jobs), "cluster": cluster, "rows_rejected_by_validation": int(len(rejects)), **run}
        if len(rejects):
            write_atomic(out / "rejects.csv", lambda p: rejects.to_csv(p, index=False))
            _out.print(f"{len(rejects):,} row(s) failed validation: {out / 'rejects.csv'}")
        with output_errors(out):
            json_path, html_path = write_report(records, run, out, config.metrics,
                                                start_estimates=None if estimating is None else estimating.reports(records))
        _print_skipped(run)
        _print_table(json_path)
        typer.echo(f"wrote {json_path} and {html_path}")


def check_policies(names: list[str], policy_file: Path | None) -> None:
    """Load every policy the replay will run (presets over ``policy_file``, and ``NAME=file`` ones),
    so a bad file or name is refused before any training or replay.

    Raises
    ------
    InputError
        An unknown policy name, or a policy file that is missing or invalid (named, with the field).
    """
    from predictor.policy.presets import load_policy as load_base
    from predictor.sim.experiment import POLICIES
    from predictor.sim.rules import load_policy

    base = None if policy_file is None else str(policy_file)
    if base is not None:
        load_base(base)
    for name in names:
        label, sep, path = name.partition("=")
        if sep:
            if not label or not path:
                raise InputError(f"--policy {name!r}: write NAME=policy.yaml")
            load_policy(path)
        elif name in POLICIES:
            load_policy(POLICIES[name].preset, base_file=base)
        else:
            raise InputError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)} (or NAME=policy.yaml)")


def _print_skipped(run: dict) -> None:
    skipped = run.get("jobs_skipped") or {}
    total = sum(skipped.values())
    replayed = run.get("jobs_replayed", 0)
    line = f"replayed {replayed:,} job{'s' if replayed != 1 else ''} of {run.get('jobs_in_input', 0):,} rows"
    if run.get("training_prefix_jobs"):
        line += f" ({run['training_prefix_jobs']:,} before the replay window, for training)"
    if total:
        reasons = ", ".join(f"{n:,} {why}" for why, n in skipped.items())
        line += f"; skipped {total:,} row{'s' if total != 1 else ''}: {reasons}"
    _out.print(line, highlight=False)


def duration_text(seconds: float) -> str:
    """Seconds as one short figure with its unit (the replay report's own format)."""
    from predictor.sim.report import duration_text as text  # imported late: the CLI starts fast

    return text(seconds)


#: report.json metric -> (column header, formatter): one format per column.
_COLUMNS = {
    "avg_jct_s": ("avg JCT", duration_text),
    "p95_jct_s": ("p95 JCT", duration_text),
    "avg_wait_s": ("avg wait", duration_text),
    "max_wait_s": ("max wait", duration_text),
    "utilization": ("util", lambda v: f"{100 * v:.1f}%"),
    "jain_index": ("Jain", lambda v: f"{v:.3f}"),
    "preemptions": ("preempt", lambda v: f"{int(v):,}"),
    "gpu_hours_lost": ("GPU-h lost", lambda v: f"{v:,.1f}"),
}


@contextmanager
def _replay_many(workers: int | None, scheduler: str | None):
    """Replays on Dask (``--workers`` / ``--dask-scheduler``), or None: one after another here."""
    if workers is None and scheduler is None:
        yield None
        return
    from predictor.tune.dask_replays import DaskReplayMany, dask_client

    with dask_client(workers, scheduler) as client:
        yield DaskReplayMany(client)


def _print_table(json_path: Path) -> None:
    import json

    from rich.table import Table

    doc = json.loads(json_path.read_text())
    table = Table(title="replay (full table in report.json / report.html)")
    table.add_column("policy", no_wrap=True, min_width=max(len(n) for n in doc["policies"]))
    for label, _ in _COLUMNS.values():
        table.add_column(label, justify="right")
    table.add_column("left unfinished", justify="right")
    for name, m in doc["policies"].items():
        table.add_row(name, *("-" if m.get(c) is None else fmt(m[c]) for c, (_, fmt) in _COLUMNS.items()),
                      _left_unfinished(doc["extra"].get(name, {})))
    console = Console()
    console.print(table)
    console.print("left unfinished: jobs that left without doing all their work (out of memory for good, at their "
                  "time limit, rejected) or were still queued at the end; the JCT columns count the ones that left, "
                  "so a policy that loses jobs can look faster than one that finishes them.")


def _left_unfinished(extra: dict) -> str:
    """'N (M OOM)': the replayed jobs that did not do all their work, and how many of them failed out of memory."""
    if "jobs" not in extra:
        return "-"
    lost = int(extra["jobs"]) - int(extra.get("jobs_finished", 0))
    oom = int(extra.get("jobs_failed_oom", 0))
    return f"{lost:,} ({oom:,} OOM)" if oom else f"{lost:,}"
