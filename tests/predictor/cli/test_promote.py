"""``predictor promote`` with nothing to do says so and reports ``"promoted": false`` (issue 12, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from features.synth import generate
from predictor.cli import main

pytestmark = pytest.mark.slow


def test_promoting_the_champion_again_changes_nothing_and_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    generate(1_500, seed=3).to_parquet(tmp_path / "jobs.parquet", index=False)
    assert main(["train", "--jobs", "jobs.parquet", "--register", "--no-progress", "--trees", "20"]) == 0
    capsys.readouterr()
    assert main(["promote"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["promoted"] is True and first["reason"] == "no champion yet"
    tags = MlflowClient().get_model_version("job-predictor", "1").tags

    assert main(["promote"]) == 0  # nothing to do is not a failure...
    captured = capsys.readouterr()
    again = json.loads(captured.out)
    assert again["promoted"] is False and again["unchanged"] is True  # ...but nothing was promoted
    assert "already" in again["reason"] and "nothing to do" in captured.err
    assert MlflowClient().get_model_version("job-predictor", "1").tags == tags  # no new promotion stamp
