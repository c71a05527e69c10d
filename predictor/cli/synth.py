"""``predictor synth``: write a synthetic job history with known ground truth and compare it with a
published cluster."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from features.errors import InputError
from features.outputs import check_output_file, write_atomic
from features.schema import validate
from features.synth import DEFAULT_SUMMARY_PATH, PROFILES, calibration_report, generate, get_profile

ORDER = 12
_PHASES = ("families", "runs", "durations", "arrivals", "table", "validate", "write")


def register(app: typer.Typer) -> None:
    @app.command("synth")
    def synth_cmd(
        out: Annotated[Path, typer.Option("--out", "-o", show_default=False,
                                          help="Parquet file to write (canonical columns + ground truth); "
                                               "a missing folder is created.")],
        jobs: Annotated[int, typer.Option("--jobs", "-n", min=1, help="Number of jobs.")] = 20_000,
        seed: Annotated[int, typer.Option("--seed", "-s", min=0, help="Random seed (same seed, same table).")] = 0,
        profile: Annotated[str, typer.Option("--profile", "-p", help=f"Workload profile: {', '.join(PROFILES)}.")
                           ] = "philly",
        cluster_gpus: Annotated[int | None, typer.Option(
            "--cluster-gpus", min=1, show_default=False,
            help="GPUs of the target cluster: the trace is stretched so offered load = --load. Default: "
                 "the profile's published arrival rate sets the span.")] = None,
        load: Annotated[float, typer.Option("--load", help="Offered load with --cluster-gpus, in (0, 10].")
                        ] = 0.85,
        start: Annotated[str, typer.Option("--start", help="Trace start (ISO 8601, UTC if no offset).")
                         ] = "2025-01-01T00:00:00Z",
        published: Annotated[Path, typer.Option(
            "--published", show_default=False,
            help="AcmeTrace cluster_summary.csv to compare with [default: ../shared/data/stats/"
                 "cluster_summary.csv]; the bundled numbers are used when the file is absent.")
        ] = DEFAULT_SUMMARY_PATH,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
        progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar.")] = True,
    ) -> None:
        """Generate a synthetic GPU job history with known ground truth (Parquet); compare it with the real cluster.

        The summary statistics are compared with the published cluster the profile is calibrated to.

        Example: predictor synth --jobs 100000 --seed 1 --out jobs.parquet --cluster-gpus 512 --load 0.85
        """
        prof = get_profile(profile)
        start_ts = _parse_start(start)
        check_output_file(out)  # before generating: a bad destination fails at once
        began = time.perf_counter()
        with _PhaseProgress(progress and not as_json) as advance:
            df = generate(jobs, seed, cluster_gpus=cluster_gpus, target_load=load, start_ts=start_ts,
                          profile=prof.name, on_phase=advance)
            advance("validate")
            checked = validate(df)
            if len(checked.rejects):
                reasons = "; ".join(f"{r} ({c})" for r, c in checked.reasons().items())
                raise RuntimeError(f"synthetic table failed schema validation (a generator bug): {reasons}")
            advance("write")
            _write_parquet(df, out)
        summary = describe(df, out=out, cluster_gpus=cluster_gpus, seconds=time.perf_counter() - began)
        report = calibration_report(df, prof.cluster, published)
        if as_json:
            typer.echo(json.dumps({**summary, "profile": prof.name, "seed": seed, "calibration": report},
                                  indent=2, default=_json_default))
        else:
            console = Console()
            print_summary(summary, prof.name, seed, console)
            print_calibration(report, console)


def _parse_start(text: str) -> float:
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--start: not an ISO 8601 time: {text!r}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


class _PhaseProgress:
    """Context manager yielding ``advance(phase)``; draws a rich progress bar when enabled."""

    def __init__(self, enabled: bool) -> None:
        self.progress = Progress(TextColumn("synth {task.description:<10}"), BarColumn(), TimeElapsedColumn(),
                                 transient=True, disable=not enabled)
        self.task = None

    def __enter__(self):
        self.progress.__enter__()
        self.task = self.progress.add_task("start", total=len(_PHASES))

        def advance(name: str) -> None:
            done = _PHASES.index(name) if name in _PHASES else 0
            self.progress.update(self.task, completed=done, description=name)

        return advance

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)


def _write_parquet(df: pd.DataFrame, out: Path) -> None:
    """Write ``df`` to a temporary file beside ``out`` and rename it into place (never half-written)."""
    write_atomic(out, lambda tmp: df.to_parquet(tmp, index=False))


def describe(df: pd.DataFrame, *, out: Path | None = None, cluster_gpus: int | None = None,
             seconds: float | None = None) -> dict:
    """Headline figures of a synthetic table: size, span, population, outcomes, load."""
    first, last = float(df["submit_ts"].min()), float(df["submit_ts"].max())
    ends = df[["submit_ts", "start_ts", "end_ts"]].max().max()
    span_s = last - first
    gpu_seconds = float((df["num_gpus"] * df["duration_s"].fillna(0.0)).sum())
    return {
        "output": str(out) if out else None,
        "rows": len(df),
        "first_submit": _iso(first),
        "last_event": _iso(float(ends)),
        "span_days": round(span_s / 86400.0, 2),
        "users": int(df["user"].nunique()),
        "teams": int(df["team"].nunique()),
        "families": int(df["family"].nunique()),
        "censored": int(df["censored"].sum()),
        "states": {k: int(v) for k, v in df["state"].value_counts().items()},
        "gpu_types": {k: int(v) for k, v in df["gpu_type"].value_counts().items()},
        "offered_load": round(gpu_seconds / (span_s * cluster_gpus), 3) if cluster_gpus and span_s > 0 else None,
        "seconds": round(seconds, 2) if seconds is not None else None,
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_default(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def print_summary(summary: dict, profile: str, seed: int, console: Console) -> None:
    """Print the headline figures as a two-column table."""
    table = Table(title=f"synth {profile} (seed {seed}): {summary['output']}", show_header=False,
                  title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("jobs", f"{summary['rows']:,}")
    table.add_row("time span", f"{summary['first_submit']} .. {summary['last_event']}  ({summary['span_days']:g} days)")
    table.add_row("users / teams / families", f"{summary['users']:,} / {summary['teams']:,} / {summary['families']:,}")
    table.add_row("states", ", ".join(f"{k} {v:,}" for k, v in summary["states"].items()))
    table.add_row("censored (running/pending at end)", f"{summary['censored']:,}")
    table.add_row("GPU types", ", ".join(f"{k} {v:,}" for k, v in summary["gpu_types"].items()))
    if summary["offered_load"] is not None:
        table.add_row("offered load", f"{summary['offered_load']:.3f}")
    if summary["seconds"] is not None:
        table.add_row("time", f"{summary['seconds']:.2f} s")
    console.print(table)


def print_calibration(report: dict, console: Console) -> None:
    """Print ours vs published per metric with the difference and whether it is within tolerance."""
    table = Table(title=f"calibration vs {report['cluster']} ({report['source']}; {report['ended_jobs']:,} ended "
                        f"GPU jobs)", title_justify="left")
    for col, justify in (("metric", "left"), ("ours", "right"), ("published", "right"), ("difference", "right"),
                         ("tolerance", "right"), ("", "left")):
        table.add_column(col, justify=justify)
    for m in report["metrics"]:
        rate = m["name"].endswith("_rate_gpu")
        fmt = (lambda v: f"{v:.3f}") if rate else (lambda v: f"{v:,.1f}")
        if m["diff"] is None:
            diff = "-"
        elif m["kind"] == "relative":
            diff = f"{m['diff']:+.1%}" if math.isfinite(m["diff"]) else "inf"
        else:
            diff = f"{m['diff']:+.3f}"
        tol = f"{m['tolerance']:.0%}" if m["kind"] == "relative" else f"{m['tolerance']:.2f}"
        verdict = {True: "[green]ok[/]", False: "[red]off[/]", None: "[dim]n/a[/]"}[m["ok"]]
        table.add_row(m["name"], fmt(m["ours"]), "-" if m["published"] is None else fmt(m["published"]), diff, tol,
                      verdict)
    console.print(table)
