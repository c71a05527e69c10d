"""``predictor simulate`` in-process through ``predictor.cli.main``."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from predictor.cli import main


def _jobs(path, extra_rows=()):
    base = 1_700_000_000.0
    rows = [
        {"job_id": f"j{i}", "team": "ab"[i % 2], "num_gpus": g, "submit_ts": base + 10 * i, "start_ts": base + 10 * i,
         "end_ts": base + 10 * i + run, "duration_s": run, "state": "COMPLETED"}
        for i, (g, run) in enumerate([(8, 300), (4, 60), (8, 30), (2, 500), (1, 20), (8, 100)])
    ]
    pd.DataFrame([*rows, *extra_rows]).to_parquet(path)
    return path


def test_replays_policies_and_writes_both_reports(tmp_path, capsys):
    jobs = _jobs(tmp_path / "jobs.parquet")
    out = tmp_path / "out"
    code = main(["simulate", "--jobs", str(jobs), "--cluster", "8", "--policy", "fifo", "--policy", "sjf-oracle",
                 "--train-fraction", "0", "--out", str(out), "--no-progress"])
    assert code == 0
    doc = json.loads((out / "report.json").read_text())
    assert list(doc["policies"]) == ["fifo", "sjf-oracle"]
    assert doc["run"]["jobs_replayed"] == 6 and doc["run"]["inventory"]["gpus"] == 8
    mean_run = (300 + 60 + 30 + 500 + 20 + 100) / 6
    assert all(m["avg_jct_s"] >= mean_run and m["utilization"] <= 1.0 for m in doc["policies"].values())
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    assert "sjf-oracle" in capsys.readouterr().out
    import pandas as pd

    table = pd.read_parquet(out / "jobs.parquet")
    assert list(table.columns) == ["job_id", "policy", "team", "num_gpus", "gpu_type", "submit_ts", "start_ts", "end_ts",
                                   "state", "wait_s", "time_limit_s", "pred_p50_s"]
    assert len(table) == 12 and set(table["policy"]) == {"fifo", "sjf-oracle"} and set(table["state"]) == {"COMPLETED"}
    oracle = table[table["policy"] == "sjf-oracle"]
    assert (oracle["pred_p50_s"] > 0).all()  # the oracle told the policy the true run times


def test_a_job_bigger_than_the_cluster_is_reported(tmp_path):
    huge = {"job_id": "huge", "team": "a", "num_gpus": 64, "submit_ts": 1_700_000_005.0, "duration_s": 10.0,
            "start_ts": 1_700_000_005.0, "end_ts": 1_700_000_015.0, "state": "COMPLETED"}
    jobs = _jobs(tmp_path / "jobs.parquet", [huge])
    out = tmp_path / "out"
    assert main(["simulate", "--jobs", str(jobs), "--cluster", "8", "--policy", "fifo", "--train-fraction", "0",
                 "--out", str(out), "--no-progress"]) == 0
    extra = json.loads((out / "report.json").read_text())["extra"]["fifo"]
    assert extra["jobs_rejected"] == 1 and extra["jobs_finished"] == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "magic"], "unknown policy 'magic'"),
        ([], "name at least one --policy"),
        (["--policy", "fifo", "--cluster", "zero-gpus"], "neither a GPU count nor an existing inventory file"),
        (["--policy", "fifo", "--cluster", "0"], "at least one GPU"),
        (["--policy", "fifo", "--train-fraction", "1.5"], "train fraction"),
        (["--policy", "fifo", "--cycle-s", "0"], "--cycle-s must be positive"),
    ],
    ids=["unknown-policy", "no-policy", "bad-cluster", "zero-cluster", "bad-fraction", "bad-cycle"],
)
def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    jobs = _jobs(tmp_path / "jobs.parquet")
    base = ["simulate", "--jobs", str(jobs), "--out", str(tmp_path / "out"), "--no-progress"]
    if "--cluster" not in args:
        base += ["--cluster", "8"]
    assert main(base + args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.parametrize("kind", ["empty", "missing", "not-a-table"])
def test_unusable_job_tables_are_user_errors(tmp_path, capsys, kind):
    path = tmp_path / "jobs.parquet"
    if kind == "empty":
        pd.DataFrame({"job_id": [], "submit_ts": [], "num_gpus": []}).to_parquet(path)
    elif kind == "not-a-table":
        pd.DataFrame({"x": [1]}).to_parquet(path)
    code = main(["simulate", "--jobs", str(path), "--cluster", "8", "--policy", "fifo", "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert {"empty": "empty", "missing": "does not exist", "not-a-table": "missing column"}[kind] in err


def test_start_estimates_are_measured_into_the_report(tmp_path):
    jobs = _jobs(tmp_path / "jobs.parquet")
    out = tmp_path / "out"
    code = main(["simulate", "--jobs", str(jobs), "--cluster", "8", "--policy", "sjf-oracle", "--train-fraction", "0",
                 "--out", str(out), "--no-progress", "--start-estimates"])
    assert code == 0
    block = json.loads((out / "report.json").read_text())["extra"]["sjf-oracle"]["start_estimate"]
    assert block["model"]["n"] == 6 and 0.0 <= block["model"]["coverage"] <= 1.0
    assert "time_limit" not in block  # the log has no time limits
    assert main(["simulate", "--jobs", str(jobs), "--cluster", "8", "--policy", "fifo", "--out", str(out),
                 "--start-estimates", "--workers", "2", "--no-progress"]) == 2
