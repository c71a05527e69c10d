"""A study in MLflow: one parent run, a nested run per trial, the outputs as artifacts.

The parent run (``tune-<seed>-<trials>``) holds the study's settings and split as parameters, the
validation metrics as ``validation.<policy>.<metric>``, the tuning-window baselines as
``tune.<policy>.<metric>``, and ``report.json``, ``report.html``, ``study.json``, ``policy.yaml``,
``slurm-priority.conf`` and ``kueue-manifests.yaml`` as artifacts. Each trial is a nested run
(tag ``mlflow.parentRunId``) with its searched settings as parameters and its tuning-window metrics,
logged as each generation is told, so the MLflow UI shows the study while it runs.

The store is the one ``predictor train`` uses (``models.registry.tracking_uri``:
``MLFLOW_TRACKING_URI``, else ``sqlite:///<cwd>/mlflow.db``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from models.registry import ensure_experiment, tracking_uri
from predictor.tune.search import TrialRecord
from predictor.tune.study import TuneResult

__all__ = ["StudyTracker"]


def _metrics(prefix: str, values: Mapping[str, float | None], ts: int) -> list[Metric]:
    out = []
    for k, v in values.items():
        if v is not None and math.isfinite(float(v)):
            out.append(Metric(f"{prefix}{k}", float(v), ts, 0))
    return out


class StudyTracker:
    """The parent run of one study; ``trials`` logs a generation, ``finish`` the result and artifacts.

    Parameters
    ----------
    experiment : str
        MLflow experiment name.
    run_name : str
    params : mapping
        The study's settings (logged on the parent run).
    uri : str, optional
        Tracking URI (default: ``models.registry.tracking_uri``'s choice).
    """

    def __init__(self, experiment: str, run_name: str, params: Mapping[str, object], uri: str | None = None) -> None:
        self.uri = tracking_uri(uri)
        self.client = MlflowClient(self.uri)
        self.experiment_id = ensure_experiment(experiment)
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags={"predictor.kind": "tune-study"})
        self.run_id = run.info.run_id
        self.client.log_batch(self.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])

    def trials(self, records: Sequence[TrialRecord]) -> None:
        """A nested run per trial of a generation."""
        for rec in records:
            run = self.client.create_run(self.experiment_id, run_name=f"trial-{rec.number}", tags={
                "mlflow.parentRunId": self.run_id, "predictor.kind": "tune-trial", "trial": str(rec.number),
                "state": "COMPLETE" if rec.ok else "FAIL"})
            ts = int(run.info.start_time)
            self.client.log_batch(
                run.info.run_id, params=[Param(k, repr(v)) for k, v in rec.params.items()],
                metrics=_metrics("", rec.metrics or {}, ts) + [Metric("replay_cpu_s", rec.cpu_s, ts, 0)],
                tags=[RunTag("error", rec.error[:5000])] if rec.error else [])
            self.client.set_terminated(run.info.run_id, "FINISHED" if rec.ok else "FAILED")

    def finish(self, result: TuneResult, files: Sequence[Path]) -> None:
        """Validation and baseline metrics, the chosen trial, the output files; ends the parent run."""
        ts = mlflow.utils.time.get_current_time_millis()
        metrics = []
        for name, values in result.validation.items():
            metrics += _metrics(f"validation.{name}.", values, ts)
        for name, values in result.tuning_baselines.items():
            metrics += _metrics(f"tune.{name}.", values, ts)
        metrics += _metrics("tune.chosen.", result.chosen.metrics or {}, ts)
        metrics += [Metric(f"seconds.{k}", float(v), ts, 0) for k, v in result.seconds.items()]
        self.client.log_batch(self.run_id, metrics=metrics, tags=[
            RunTag("chosen_trial", result.judge if result.choice.baseline else str(result.chosen.number)),
            RunTag("judged_against", result.judge),
            RunTag("chosen_qualified", str(result.choice.qualified)),
            RunTag("rule", result.choice.rule[:5000])])
        for path in files:
            self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, "FINISHED")

    def fail(self) -> None:
        """End the parent run as failed (the study stopped)."""
        self.client.set_terminated(self.run_id, "FAILED")
