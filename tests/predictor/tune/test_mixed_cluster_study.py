"""``predictor tune`` on a small cluster of three GPU types, end to end on a real Dask ``LocalCluster``
with worker processes: plain QSSF, which sizes nothing by memory, loses many jobs out of memory, so
the study judges against ``qssf-sized`` (QSSF with the base policy's sizing; ``study.judging_baseline``),
and what it recommends loses no more jobs than the base policy (rule *chosen point*, docs/tuning.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from features.synth import generate
from predictor.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def test_on_several_gpu_types_the_study_judges_against_the_qssf_that_sizes_and_loses_no_jobs_for_it(
        tmp_path, capsys) -> None:
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
    tuning = study["tuning_baselines"]
    assert list(tuning) == ["qssf", "qssf-sized", "fifo", "ours"]
    base, plain, sized = (tuning[n]["jobs_failed_oom"] for n in ("ours", "qssf", "qssf-sized"))
    assert plain >= 2 * base and plain - base >= 5, (plain, base)  # the workload does what the test is about
    assert sized <= base + 1, (sized, base)  # the same sizing as ours: the same jobs fit
    assert study["judged_against"] == "qssf-sized"
    assert study["rule"].startswith("largest margin over qssf-sized (")
    assert f"loses no more jobs to out-of-memory failures than qssf-sized ({sized})" in study["rule"]
    assert report["rule"] == study["rule"]
    assert not study["chosen_is_base"]  # the judge loses no more jobs than the base: no fallback past it
    policy = yaml.safe_load((out / "policy.yaml").read_text())
    assert policy["sizing"]["use_predictions"] is True  # whatever is chosen sizes by predicted memory
    validation = report["validation"]
    assert list(validation) == ["tuned", "ours", "qssf", "qssf-sized", "fifo", "kueue", "sjf-oracle"]
    assert validation["tuned"]["jobs_failed_oom"] <= validation["ours"]["jobs_failed_oom"] + 1
    assert validation["tuned"]["jobs_failed_oom"] < validation["qssf"]["jobs_failed_oom"]
    if study["chosen_is_qssf"]:
        assert validation["tuned"] == validation["qssf-sized"]  # the judge itself, replayed on the same window
        assert "chosen: qssf-sized (smallest predicted GPU-time first, GPU flavor sized" in captured.out
        assert "the chosen policy is qssf-sized itself" in " ".join(captured.err.split())
    html = (out / "report.html").read_text()
    assert "QSSF with the base policy&#x27;s sizing (qssf-sized)" in html
