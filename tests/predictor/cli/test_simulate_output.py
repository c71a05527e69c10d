"""``predictor simulate`` checks every input before any work and says what it replayed (issue 12, item 3)."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from predictor.cli import main

BASE_TS = 1_700_000_000.0


def _jobs(path, n_gpu: int = 40, n_cpu: int = 7):
    rows = [{"job_id": f"g{i}", "team": "ab"[i % 2], "num_gpus": 1 + i % 4, "submit_ts": BASE_TS + 60 * i,
             "start_ts": BASE_TS + 60 * i, "end_ts": BASE_TS + 60 * i + 30 + 97 * i, "duration_s": 30.0 + 97 * i,
             "state": "COMPLETED"} for i in range(n_gpu)]
    rows += [{"job_id": f"c{i}", "team": "a", "num_gpus": 0, "submit_ts": BASE_TS + 60 * i + 7,
              "start_ts": BASE_TS + 60 * i + 7, "end_ts": BASE_TS + 60 * i + 100, "duration_s": 93.0,
              "state": "COMPLETED"} for i in range(n_cpu)]
    pd.DataFrame(rows).to_parquet(path)
    return path


def _run(tmp_path, *args: str) -> int:
    return main(["simulate", "--jobs", str(_jobs(tmp_path / "jobs.parquet")), "--cluster", "16", "--out",
                 str(tmp_path / "out"), "--no-progress", *args])


@pytest.mark.parametrize(("policy_text", "words"), [
    pytest.param("weights: {age: -1}\n", "weights", id="invalid-value"),
    pytest.param("colour: red\n", "colour", id="unknown-field"),
    pytest.param("weights: [\n", "YAML", id="not-yaml"),
])
def test_a_bad_policy_file_is_refused_before_any_training(tmp_path, capsys, policy_text: str, words: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(policy_text)
    assert _run(tmp_path, "--policy", "ours", "--policy", f"x={bad}") == 2
    err = capsys.readouterr().err
    assert words in err and str(bad) in err
    assert "training" not in err and "predicting" not in err and "replaying" not in err, err


def test_a_missing_policy_file_and_a_bad_base_file_are_refused_first(tmp_path, capsys) -> None:
    assert _run(tmp_path, "--policy", "ours", "--policy", f"x={tmp_path / 'nope.yaml'}") == 2
    err = capsys.readouterr().err
    assert "nope.yaml" in err and "training" not in err
    base = tmp_path / "base.yaml"
    base.write_text("teams: {a: {share: -2}}\n")
    assert _run(tmp_path, "--policy", "ours", "--policy-file", str(base)) == 2
    err = capsys.readouterr().err
    assert "share" in err and "training" not in err


def test_skipped_rows_are_said_on_the_terminal(tmp_path, capsys) -> None:
    assert _run(tmp_path, "--policy", "fifo", "--train-fraction", "0") == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "skipped 7 rows: 7 no GPU requested (CPU-only job)" in text, text
    assert "replaying 40 jobs" in text and "replaying 1 jobs" not in text


def test_the_table_has_one_number_format_per_column(tmp_path, capsys) -> None:
    assert _run(tmp_path, "--policy", "fifo", "--policy", "sjf-oracle", "--policy", "las", "--train-fraction", "0") == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 3
    duration = re.compile(r"^\d+(\.\d)? (s|min|h|d)$")
    formats = [duration, duration, duration, duration, re.compile(r"^\d+\.\d%$"), re.compile(r"^[01]\.\d{3}$"),
               re.compile(r"^[\d,]+$"), re.compile(r"^[\d,]+\.\d$"), re.compile(r"^[\d,]+( \([\d,]+ OOM\))?$")]
    for row in rows:
        for cell, fmt in zip(row[1:], formats, strict=True):
            assert fmt.match(cell), (cell, row)


def test_the_table_says_how_many_jobs_left_unfinished_and_how_many_ran_out_of_memory(tmp_path, capsys) -> None:
    """A policy that loses jobs to out-of-memory crashes shortens its average JCT: the table shows the loss."""
    import json

    frame = pd.read_parquet(_jobs(tmp_path / "jobs.parquet", n_cpu=0))
    frame["true_peak_vram_mib"] = [200_000.0 if i % 5 == 0 else 8_000.0 for i in range(len(frame))]  # > any GPU
    frame.to_parquet(tmp_path / "oom.parquet")
    assert main(["simulate", "--jobs", str(tmp_path / "oom.parquet"), "--cluster", "16", "--out", str(tmp_path / "out"),
                 "--no-progress", "--policy", "fifo", "--train-fraction", "0"]) == 0
    out = capsys.readouterr().out
    extra = json.loads((tmp_path / "out" / "report.json").read_text())["extra"]["fifo"]
    assert extra["jobs_failed_oom"] == 8, extra
    row = next(line for line in out.splitlines() if line.startswith("│") and "fifo" in line)
    left = extra["jobs"] - extra["jobs_finished"]
    assert row.split("│")[-2].strip() == f"{left:,} (8 OOM)", row
    assert "left unfinished: jobs that left without doing all their work" in " ".join(out.split())
