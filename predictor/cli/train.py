"""``predictor train | evaluate | predict | promote``: the model lifecycle on the MLflow store.

The store is ``MLFLOW_TRACKING_URI`` when set, else ``sqlite:///<cwd>/mlflow.db`` with artifacts in
``./mlartifacts``; ``mlflow ui --backend-store-uri sqlite:///mlflow.db`` shows the runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from features.errors import InputError
from features.outputs import check_output_file, write_atomic

ORDER = 20
_MODEL_HELP = "Model URI: models:/job-predictor@champion, models:/job-predictor/3, runs:/<id>/model."


def _load(path: Path):
    from features.ingest import load_jobs

    jobs = load_jobs(path)
    if jobs.empty:
        raise InputError(f"{path}: no jobs in the table")
    return jobs


class _Phases:
    """A spinner that shows the current training phase."""

    def __init__(self, enabled: bool) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=Console(stderr=True), disable=not enabled)
        self.task = self.progress.add_task("starting", total=None)

    def __enter__(self) -> _Phases:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, name: str) -> None:
        self.progress.update(self.task, description=name)


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_cmd(
        jobs: Annotated[Path, typer.Option("--jobs", "-j", help="Canonical job table (Parquet or CSV).",
                                           show_default=False)],
        experiment: Annotated[str, typer.Option("--experiment", help="MLflow experiment name.")] = "job-predictor",
        register_model: Annotated[bool, typer.Option("--register", help="Register as a new version of job-predictor "
                                                     "with alias challenger.")] = False,
        test_fraction: Annotated[float, typer.Option("--test-fraction", help="Latest share held out for testing.")] = 0.15,
        calibration_fraction: Annotated[float, typer.Option("--calibration-fraction",
                                                            help="Share before it used for calibration.")] = 0.15,
        trees: Annotated[int | None, typer.Option("--trees", min=1, show_default=False, help="Boosting rounds of "
                                                  "the duration and memory models (default: 200 each).")] = None,
        progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    ) -> None:
        """Split by submit time, train, evaluate against baselines and log the run to MLflow.

        Example: predictor train --jobs jobs.parquet --register
        """
        from models.registry import tracking_uri
        from models.train import train_pipeline

        table = _load(jobs)
        uri = tracking_uri()
        with _Phases(progress) as phases:
            result = train_pipeline(table, experiment=experiment, register=register_model,
                                    test_fraction=test_fraction, calibration_fraction=calibration_fraction,
                                    source=str(jobs), n_estimators=trees, on_phase=phases)
        out = {"run_id": result.run_id, "model_uri": result.model_uri, "version": result.version,
               "tracking_uri": uri, "train_seconds": round(result.train_seconds, 2), "headline": result.headline}
        typer.echo(json.dumps(out, indent=2))

    @app.command("evaluate")
    def evaluate_cmd(
        jobs: Annotated[Path, typer.Option("--jobs", "-j", help="Labelled canonical job table.", show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", help="Report (JSON); a missing folder is created.",
                                          show_default=False)],
        model: Annotated[str, typer.Option("--model", help=_MODEL_HELP)] = "models:/job-predictor@champion",
    ) -> None:
        """Evaluate a model on any labelled table, beside the baselines; write the JSON report.

        Example: predictor evaluate --jobs later.parquet --model models:/job-predictor@challenger --out report.json
        """
        from models.evaluate import evaluate_bundle
        from models.registry import load_bundle, tracking_uri

        check_output_file(out)  # before loading and evaluating: a bad destination fails at once
        table = _load(jobs)
        tracking_uri()
        report = evaluate_bundle(load_bundle(model), table)
        write_atomic(out, lambda p: p.write_text(json.dumps(report, indent=2) + "\n"))
        typer.echo(f"wrote {out}")

    @app.command("predict")
    def predict_cmd(
        jobs: Annotated[Path, typer.Option("--jobs", "-j", help="Canonical job table to score.", show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", help="Predictions (Parquet); a missing folder is "
                                          "created.", show_default=False)],
        model: Annotated[str, typer.Option("--model", help=_MODEL_HELP)] = "models:/job-predictor@champion",
    ) -> None:
        """Batch scoring: one row of predictions per job (history point in time, as the service sees it).

        Example: predictor predict --jobs queue.parquet --model models:/job-predictor@champion --out preds.parquet
        """
        from models.evaluate import predictions_for
        from models.registry import load_bundle, tracking_uri

        check_output_file(out)  # before loading and scoring: a bad destination fails at once
        table = _load(jobs)
        tracking_uri()
        preds, _ = predictions_for(load_bundle(model), table)
        write_atomic(out, lambda p: preds.to_parquet(p, index=False))
        typer.echo(f"wrote {len(preds):,} predictions to {out}")

    @app.command("promote")
    def promote_cmd(
        source: Annotated[str, typer.Option("--from", help="Alias to promote.")] = "challenger",
        target: Annotated[str, typer.Option("--to", help="Alias to move.")] = "champion",
        force: Annotated[bool, typer.Option("--force", help="Promote even if the gate fails (needs --reason).")] = False,
        reason: Annotated[str | None, typer.Option("--reason", help="Why (recorded on the model version).",
                                                   show_default=False)] = None,
        jobs: Annotated[Path | None, typer.Option("--jobs", help="Held-out table to compare on (default: the "
                                                  "challenger run's test split).", show_default=False)] = None,
    ) -> None:
        """Move alias champion to the challenger if it is not worse on the same held-out jobs.

        Exit 0 when promoted or when there is nothing to do (the alias points there already:
        "promoted": false, "unchanged": true); 1 when the gate refuses.

        Example: predictor promote --from challenger --to champion
        """
        from models.registry import promote, tracking_uri

        tracking_uri()
        result = promote(source=source, target=target, force=force, reason=reason,
                         jobs=_load(jobs) if jobs is not None else None)
        typer.echo(json.dumps(result, indent=2, default=str))
        if result.get("unchanged"):
            Console(stderr=True).print(f"nothing to do: {result['reason']}")
            return
        if not result["promoted"]:
            Console(stderr=True).print(f"[bold red]refused:[/] {result['reason']}")
            raise typer.Exit(1)
