"""``predictor demo`` end to end: every real step (synth, ingest, train + MLflow registry, promote,
replay, a real uvicorn server scoring a live queue) on a small history."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_demo_runs_every_step_and_scores_a_live_queue(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    # a user's shell: none of the service settings other tests may have set in this process
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREDICTOR_", "MLFLOW_"))}
    port = _free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "predictor", "demo", "--workdir", str(workdir), "--jobs", "600",
         "--cluster-gpus", "32", "--bind", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]

    # every artefact a user is pointed at exists and holds what it should
    assert (workdir / "jobs.parquet").stat().st_size > 0
    assert (workdir / "eagle.parquet").stat().st_size > 0
    report = json.loads((workdir / "replay" / "report.json").read_text())
    assert set(report["policies"]) == {"fifo", "qssf", "kueue", "ours", "sjf-oracle"}
    for metrics in report["policies"].values():
        assert metrics["avg_jct_s"] > 0
    assert "<html" in (workdir / "replay" / "report.html").read_text().lower()

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    champion = client.get_model_version_by_alias("job-predictor", "champion")
    assert int(champion.version) >= 1

    # the live queue was scored by the trained champion, through the real server
    assert "submitted 40 pending jobs" in out
    assert "reported 60 recent runs" in out and (workdir / "demo-policy.yaml").is_file()  # shares and usage
    assert f"model job-predictor/{champion.version}" in out
    assert "server stopped" in out
