"""Training pipeline, registry and promotion on a real MLflow store in tmp_path (no mocks)."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from features.synth import generate
from models.prediction import PREDICTION_COLUMNS
from predictor.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SQLite tracking store and artifact folder, the working directory set to tmp_path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tables")
    jobs = generate(2_500, seed=21)
    later = generate(800, seed=22, start_ts=float(jobs["submit_ts"].max()) + 60)
    rng = np.random.default_rng(0)
    garbage = jobs.assign(duration_s=rng.permutation(jobs["duration_s"].to_numpy()),
                          peak_vram_mib=rng.permutation(jobs["peak_vram_mib"].to_numpy()))
    paths = {"jobs": folder / "jobs.parquet", "later": folder / "later.parquet", "garbage": folder / "garbage.parquet"}
    for name, frame in (("jobs", jobs), ("later", later), ("garbage", garbage)):
        frame.to_parquet(paths[name], index=False)
    return paths


def run_cli(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().out


def train(path: Path, capsys: pytest.CaptureFixture) -> dict:
    code, out = run_cli(["train", "--jobs", str(path), "--register", "--no-progress", "--trees", "30"], capsys)
    assert code == 0
    return json.loads(out[out.index("{"):])


def test_train_logs_a_reviewable_run(store: Path, tables: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    result = train(tables["jobs"], capsys)
    assert result["version"] == "1" and (store / "mlflow.db").exists()
    client = MlflowClient()
    run = client.get_run(result["run_id"])
    params, metrics = run.data.params, run.data.metrics
    assert {"data_sha256", "data_rows", "data_submit_min", "data_submit_max", "n_train", "n_test",
            "feature_pipeline_version"} <= set(params)
    assert params["data_rows"] == "2500"
    for predictor in ("model", "requested_time", "user_last2", "family_mean", "global_median"):
        assert f"duration/{predictor}/mean_abs_log_ratio" in metrics
    assert {"memory/model/underestimate_rate", "memory/analytic/mean_abs_log_ratio", "train_seconds"} <= set(metrics)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert {"report.json", "heldout", "plots"} <= artifacts
    assert {"plots/duration_predicted_vs_actual.png", "plots/duration_interval_coverage_over_time.png",
            "plots/duration_error_by_team.png", "plots/duration_error_by_gpu_count.png",
            "plots/feature_importance_duration.png"} <= plots
    version = client.get_model_version("job-predictor", "1")
    assert str(client.get_model_version_by_alias("job-predictor", "challenger").version) == "1"
    assert "duration_mean_abs_log_ratio" in version.tags and version.tags["run_id"] == run.info.run_id
    model = mlflow.pyfunc.load_model("models:/job-predictor@challenger")
    assert model.metadata.signature is not None
    later = pd.read_parquet(tables["later"]).head(5)
    assert tuple(model.predict(later).columns) == PREDICTION_COLUMNS


def test_evaluate_predict_and_promote(store: Path, tables: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    train(tables["jobs"], capsys)
    report_path, preds_path = store / "out" / "report.json", store / "out" / "preds.parquet"
    code, _ = run_cli(["evaluate", "--jobs", str(tables["later"]), "--model", "models:/job-predictor@challenger",
                       "--out", str(report_path)], capsys)
    assert code == 0
    report = json.loads(report_path.read_text())
    assert set(report["duration"]) == {"model", "requested_time", "user_last2", "user_mean", "family_mean", "global_median",
                                        "user_interval"}
    code, _ = run_cli(["predict", "--jobs", str(tables["later"]), "--model", "models:/job-predictor/1",
                       "--out", str(preds_path)], capsys)
    preds = pd.read_parquet(preds_path)
    assert code == 0 and tuple(preds.columns) == PREDICTION_COLUMNS and len(preds) == 800
    assert preds["model_version"].eq("job-predictor/1").all()

    code, out = run_cli(["promote"], capsys)
    assert code == 0 and json.loads(out)["reason"] == "no champion yet"

    train(tables["garbage"], capsys)  # version 2: trained on shuffled labels
    held = ["--jobs", str(tables["later"])]
    code, out = run_cli(["promote", *held], capsys)
    refused = json.loads(out)
    assert code == 1 and not refused["promoted"] and "worse than champion" in refused["reason"]
    client = MlflowClient()
    assert str(client.get_model_version_by_alias("job-predictor", "champion").version) == "1"

    assert main(["promote", "--force", *held]) == 2  # --force needs --reason
    code, out = run_cli(["promote", "--force", "--reason", "rollback drill", *held], capsys)
    assert code == 0 and json.loads(out)["promoted"]
    assert str(client.get_model_version_by_alias("job-predictor", "champion").version) == "2"
    tags = client.get_model_version("job-predictor", "2").tags
    assert tags["promotion_forced"] == "true" and tags["promotion_reason"] == "rollback drill"
    assert tags["promoted_to_champion_by"] and tags["promotion_gate_failure"] != "none"


def test_missing_alias_is_a_clear_error(store: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", "--jobs", "nope.parquet", "--out", "r.json"]) == 2
    assert "input not found" in capsys.readouterr().err
