"""``predictor tune`` on a small cluster of three GPU types: QSSF, which sizes nothing by memory, loses
many jobs out of memory, so when nothing beats it clearly the recommended policy is the base policy
(rule *chosen point*, docs/tuning.md), end to end on a real Dask ``LocalCluster`` with worker processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from features.synth import generate
from predictor.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def test_the_base_policy_is_recommended_over_a_qssf_that_loses_jobs(tmp_path, capsys) -> None:
    inventory = yaml.safe_load((ROOT / "data" / "inventory" / "example-cluster.yaml").read_text())
    for node in inventory["nodes"]:
        node["count"] = 1  # 8 A100-80GB, 4 L40S, 8 A10
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(inventory))
    generate(500, seed=2, cluster_gpus=20, target_load=1.0).to_parquet(tmp_path / "jobs.parquet")
    out = tmp_path / "tuned"
    code = main(["tune", "--jobs", str(tmp_path / "jobs.parquet"), "--cluster", str(tmp_path / "cluster.yaml"),
                 "--trials", "8", "--population", "4", "--workers", "2", "--out", str(out), "--no-mlflow"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    study = json.loads((out / "study.json").read_text())
    report = json.loads((out / "report.json").read_text())
    base = study["tuning_baselines"]["ours"]["jobs_failed_oom"]
    qssf = study["tuning_baselines"]["qssf"]["jobs_failed_oom"]
    assert qssf >= 2 * base and qssf - base >= 5, (qssf, base)  # the workload does what the test is about
    assert study["chosen_is_base"] and not study["chosen_is_qssf"]
    assert f"qssf lost {qssf:,} of the tuning window's jobs to out-of-memory failures against" in study["rule"]
    assert report["rule"] == study["rule"]
    policy = yaml.safe_load((out / "policy.yaml").read_text())
    assert policy["sizing"]["use_predictions"] is True and policy["ordering"] == "multifactor"
    validation = report["validation"]
    assert validation["tuned"] == validation["ours"]  # the base policy, replayed on the same window
    assert validation["tuned"]["jobs_failed_oom"] < validation["qssf"]["jobs_failed_oom"]
    assert "chosen: the base policy (trial 0)" in captured.out
    assert "the chosen policy is the base policy" in " ".join(captured.err.split())
