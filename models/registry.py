"""MLflow side of the models: tracking store, the pyfunc bundle, the registry, aliases, promotion.

Store: ``MLFLOW_TRACKING_URI`` when set, else an embedded SQLite database ``./mlflow.db`` with
artifacts in ``./mlartifacts`` (both in the working directory). Registered model ``job-predictor``;
a new version gets alias ``challenger``; ``promote`` moves ``champion``.

Promotion gate (``PROMOTION_THRESHOLDS``, evaluated with MLflow's ``MetricThreshold`` and
``mlflow.validate_evaluation_results``): both versions are evaluated on the same held-out jobs (the
challenger run's test split, logged as ``heldout/heldout.parquet``, or a table passed in), and the
challenger must not be worse than the champion beyond a declared tolerance on each metric.
``--force`` skips the gate and records who forced it and why as model-version tags.
"""

from __future__ import annotations

import getpass
import os
import pickle
import tempfile
import time
from pathlib import Path

import mlflow
import mlflow.pyfunc
import pandas as pd
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import EvaluationResult, MetricThreshold, ModelSignature
from mlflow.models.evaluation.validation import ModelValidationFailedException
from mlflow.types import ColSpec, Schema

from features.errors import InputError
from features.schema import BOOL_COLUMNS, COLUMNS, FLOAT_COLUMNS
from models.bundle import JobPredictorBundle
from models.evaluate import evaluate_bundle
from models.prediction import PREDICTION_COLUMNS

__all__ = [
    "MODEL_NAME",
    "PROMOTION_THRESHOLDS",
    "tracking_uri",
    "ensure_experiment",
    "JobPredictorModel",
    "log_bundle",
    "register_version",
    "alias_version",
    "load_bundle",
    "load_predictor",
    "promote",
    "headline_metrics",
]

MODEL_NAME = "job-predictor"
#: metric -> (greater is better, tolerance): the challenger may be worse than the champion by at
#: most the tolerance (absolute for rates and coverage error, relative for the log-ratio error).
PROMOTION_THRESHOLDS: dict[str, tuple[bool, float, str]] = {
    "duration_mean_abs_log_ratio": (False, 0.02, "relative"),
    "duration_within_2x": (True, 0.01, "absolute"),
    "duration_coverage_error": (False, 0.03, "absolute"),
    "memory_underestimate_rate": (False, 0.01, "absolute"),
    "memory_mean_abs_log_ratio": (False, 0.02, "relative"),
}


def tracking_uri(uri: str | None = None) -> str:
    """Point MLflow at ``uri``, ``MLFLOW_TRACKING_URI``, or ``sqlite:///<cwd>/mlflow.db``; return it."""
    chosen = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    mlflow.set_tracking_uri(chosen)
    return chosen


def ensure_experiment(name: str) -> str:
    """Experiment id of ``name``, created with a local artifact folder when the store is local."""
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    uri = mlflow.get_tracking_uri()
    location = None
    if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
        location = (Path.cwd() / "mlartifacts").resolve().as_uri()
    return mlflow.create_experiment(name, artifact_location=location)


class JobPredictorModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: one artifact, the pickled ``JobPredictorBundle`` (estimators, pipeline, history)."""

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        with open(context.artifacts["bundle"], "rb") as fh:
            self.bundle: JobPredictorBundle = pickle.load(fh)

    def predict(self, context: mlflow.pyfunc.PythonModelContext, model_input: pd.DataFrame,
                params: dict | None = None) -> pd.DataFrame:
        return self.bundle.predict_frame(model_input)


def _signature() -> ModelSignature:
    def kind(col: str) -> str:
        return "double" if col in FLOAT_COLUMNS else "boolean" if col in BOOL_COLUMNS else "string"

    inputs = Schema([ColSpec(kind(c), c, required=(c == "job_id")) for c in COLUMNS])
    out_kind = {"fallback": "boolean", "job_id": "string", "fits_gpu_types": "string", "model_version": "string",
                "fallback_reason": "string"}
    outputs = Schema([ColSpec(out_kind.get(c, "double"), c, required=False) for c in PREDICTION_COLUMNS])
    return ModelSignature(inputs=inputs, outputs=outputs)


def plain_frame(jobs: pd.DataFrame) -> pd.DataFrame:
    """Canonical columns with numpy dtypes (strings as objects, None for null) for MLflow."""
    out = {}
    for c in COLUMNS:
        if c in FLOAT_COLUMNS:
            out[c] = jobs[c].astype("float64")
        elif c in BOOL_COLUMNS:
            out[c] = jobs[c].astype(bool)
        else:
            out[c] = pd.Series(jobs[c].to_numpy(dtype=object, na_value=None), index=jobs.index, dtype=object)
    return pd.DataFrame(out)


def log_bundle(bundle: JobPredictorBundle, input_example: pd.DataFrame) -> mlflow.models.model.ModelInfo:
    """Log the bundle as one pyfunc model (named ``model``) in the active run."""
    import lightgbm
    import numpy
    import scipy
    import sklearn

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bundle.pkl"
        with open(path, "wb") as fh:
            pickle.dump(bundle, fh, protocol=5)
        reqs = [f"pandas=={pd.__version__}", f"numpy=={numpy.__version__}", f"lightgbm=={lightgbm.__version__}",
                f"scikit-learn=={sklearn.__version__}", f"scipy=={scipy.__version__}", "gpu-job-predictor"]
        return mlflow.pyfunc.log_model(
            name="model", python_model=JobPredictorModel(), artifacts={"bundle": str(path)},
            signature=_signature(), input_example=plain_frame(input_example), pip_requirements=reqs,
        )


def register_version(model_uri: str, tags: dict[str, str], *, name: str = MODEL_NAME,
                     alias: str = "challenger") -> str:
    """Register ``model_uri`` as a new version of ``name`` with ``alias`` and ``tags``; returns the version."""
    version = mlflow.register_model(model_uri, name).version
    client = MlflowClient()
    client.set_registered_model_alias(name, alias, version)
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)
    return str(version)


def alias_version(name: str, alias: str, *, tracking_uri: str | None = None) -> str | None:
    """The version ``alias`` points at (None when the model or the alias does not exist)."""
    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def version_registered_ts(name: str, version: str, *, tracking_uri: str | None = None) -> float:
    """When version ``version`` of registered model ``name`` was created, epoch seconds."""
    created_ms = MlflowClient(tracking_uri=tracking_uri).get_model_version(name, version).creation_timestamp
    return float(created_ms) / 1000.0


def _resolve(uri: str, tracking: str | None) -> tuple[str, str | None]:
    """``models:/name@alias`` -> (``models:/name/<v>``, ``name/<v>``); other URIs unchanged."""
    if uri.startswith("models:/") and "@" in uri:
        name, alias = uri[len("models:/"):].split("@", 1)
        version = alias_version(name, alias, tracking_uri=tracking)
        if version is None:
            raise InputError(f"no version of registered model {name!r} has alias {alias!r}")
        return f"models:/{name}/{version}", f"{name}/{version}"
    if uri.startswith("models:/"):
        return uri, uri[len("models:/"):]
    return uri, None


def load_bundle(uri: str, *, tracking_uri: str | None = None) -> JobPredictorBundle:
    """The ``JobPredictorBundle`` behind a model URI (``models:/job-predictor@champion``, ``runs:/...``)."""
    if tracking_uri is not None:
        mlflow.set_tracking_uri(tracking_uri)
    resolved, label = _resolve(uri, tracking_uri)
    try:
        model = mlflow.pyfunc.load_model(resolved)
    except MlflowException as exc:
        raise InputError(f"cannot load model {uri}: {exc.message}") from exc
    bundle = model.unwrap_python_model().bundle
    if label is not None:
        bundle.version = label
    return bundle


def load_predictor(uri: str, *, tracking_uri: str | None = None) -> JobPredictorBundle:
    """What the serving layer loads: the bundle (it has ``predict_frame`` and ``history``)."""
    return load_bundle(uri, tracking_uri=tracking_uri)


def headline_metrics(report: dict) -> dict[str, float]:
    """Flat metrics the promotion gate and the version tags use."""
    out: dict[str, float] = {}
    dur = report.get("duration", {}).get("model", {})
    mem = report.get("memory", {}).get("model", {})
    if dur.get("n"):
        out["duration_mean_abs_log_ratio"] = dur["mean_abs_log_ratio"]
        out["duration_within_2x"] = dur["within_2x"]
        out["duration_median_ae"] = dur["median_ae"]
        out["duration_coverage"] = dur["coverage"]
        out["duration_coverage_error"] = abs(dur["coverage"] - 0.8)
    if mem.get("n"):
        out["memory_underestimate_rate"] = mem["underestimate_rate"]
        out["memory_mean_abs_log_ratio"] = mem["mean_abs_log_ratio"]
        out["memory_mean_overreserve_ratio"] = mem["mean_overreserve_ratio"]
    return out


def _heldout(name: str, version: str) -> pd.DataFrame:
    run_id = MlflowClient().get_model_version(name, version).run_id
    try:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="heldout/heldout.parquet")
    except MlflowException as exc:
        raise InputError(f"{name}/{version} has no held-out data logged; pass --jobs") from exc
    return pd.read_parquet(path)


def _thresholds(champion: dict[str, float]) -> dict[str, MetricThreshold]:
    out = {}
    for metric, (greater, tol, mode) in PROMOTION_THRESHOLDS.items():
        if metric not in champion:
            continue
        base = champion[metric]
        slack = tol * abs(base) if mode == "relative" else tol
        out[metric] = MetricThreshold(threshold=base - slack if greater else base + slack, greater_is_better=greater)
    return out


def promote(*, name: str = MODEL_NAME, source: str = "challenger", target: str = "champion",
            force: bool = False, reason: str | None = None, jobs: pd.DataFrame | None = None) -> dict:
    """Move alias ``target`` to the version ``source`` points at, if it is not worse (see the module doc).

    Returns a dict with ``promoted`` (bool: the alias moved), ``unchanged`` (bool: it pointed at
    ``version`` already, nothing to do), ``version``, ``previous``, ``reason`` and both versions' metrics. Raises InputError when ``source`` does not exist or ``force`` lacks a reason.
    """
    client = MlflowClient()
    version = alias_version(name, source)
    if version is None:
        raise InputError(f"registered model {name!r} has no alias {source!r}")
    if force and not reason:
        raise InputError("--force needs --reason TEXT (recorded on the model version)")
    previous = alias_version(name, target)
    result: dict = {"version": version, "previous": previous, "promoted": False, "unchanged": False}
    if previous == version:  # nothing to do: not a promotion, not a refusal either
        result.update(unchanged=True, reason=f"{name}/{version} already has alias {target}")
        return result
    failure = None
    if previous is not None:
        heldout = jobs if jobs is not None else _heldout(name, version)
        cand = headline_metrics(evaluate_bundle(load_bundle(f"models:/{name}/{version}"), heldout))
        champ = headline_metrics(evaluate_bundle(load_bundle(f"models:/{name}/{previous}"), heldout))
        result.update(candidate_metrics=cand, champion_metrics=champ, n_heldout=len(heldout))
        try:
            mlflow.validate_evaluation_results(_thresholds(champ), EvaluationResult(metrics=cand, artifacts={}))
        except ModelValidationFailedException as exc:
            failure = str(exc).strip()
    if failure and not force:
        result["reason"] = f"{name}/{version} is worse than {target} {name}/{previous}: {failure}"
        return result
    client.set_registered_model_alias(name, target, version)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tags = {f"promoted_to_{target}_at": stamp, f"promoted_to_{target}_by": getpass.getuser()}
    if force:
        tags.update(promotion_forced="true", promotion_reason=reason or "", promotion_gate_failure=failure or "none")
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)
    result.update(promoted=True, reason=("forced: " + (reason or "")) if force else
                  ("no champion yet" if previous is None else "passed the promotion thresholds"))
    return result
