"""``predictor simulate --workers K``: the policies replayed in parallel on Dask give the same report."""

from __future__ import annotations

import json

import pytest

from features.synth import generate
from predictor.cli import main

pytestmark = pytest.mark.slow


def test_policies_replayed_on_two_worker_processes_give_the_sequential_report(tmp_path):
    generate(240, seed=4, cluster_gpus=16, target_load=1.0).to_parquet(tmp_path / "jobs.parquet")
    common = ["simulate", "--jobs", str(tmp_path / "jobs.parquet"), "--cluster", "16", "--no-progress",
              "--policy", "fifo", "--policy", "qssf", "--policy", "ours", "--policy", "sjf-oracle"]
    assert main([*common, "--out", str(tmp_path / "here")]) == 0
    assert main([*common, "--out", str(tmp_path / "dask"), "--workers", "2"]) == 0
    here, dask = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("here", "dask"))
    assert list(dask["policies"]) == ["fifo", "qssf", "ours", "sjf-oracle"]
    assert dask["policies"] == here["policies"]
    assert len({m["avg_jct_s"] for m in here["policies"].values()}) > 1  # the policies did differ


def test_workers_and_a_scheduler_together_are_refused(tmp_path, capsys):
    generate(40, seed=4).to_parquet(tmp_path / "jobs.parquet")
    code = main(["simulate", "--jobs", str(tmp_path / "jobs.parquet"), "--cluster", "16", "--policy", "fifo",
                 "--out", str(tmp_path / "o"), "--workers", "2", "--dask-scheduler", "tcp://127.0.0.1:1"])
    assert code == 2 and "--workers or --dask-scheduler, not both" in capsys.readouterr().err
