"""``predictor synth`` in-process: writes the table atomically, prints the comparison, fails clearly."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from features.schema import COLUMNS, validate
from features.synth import TRUTH_COLUMNS, generate
from predictor.cli import main


def test_writes_parquet_and_prints_summary_and_calibration(tmp_path, capsys):
    out = tmp_path / "jobs.parquet"
    assert main(["synth", "--jobs", "1500", "--seed", "3", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "calibration vs Philly" in text and "med_run_time_gpu" in text and "1,500" in text
    df = pd.read_parquet(out)
    assert list(df.columns) == [*COLUMNS, *TRUTH_COLUMNS] and len(validate(df).rejects) == 0
    pd.testing.assert_frame_equal(df, generate(1500, seed=3), check_dtype=False)
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.parquet"]  # no temp file left behind


def test_json_output_with_cluster_load(tmp_path, capsys):
    out = tmp_path / "jobs.parquet"
    args = ["synth", "-n", "3000", "--out", str(out), "--profile", "helios", "--cluster-gpus", "64",
            "--load", "0.6", "--json", "--start", "2024-06-01"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] == 3000 and doc["profile"] == "helios" and doc["first_submit"].startswith("2024-06-0")
    assert doc["offered_load"] == pytest.approx(0.6, rel=0.15)
    assert doc["calibration"]["cluster"] == "Helios"
    assert {m["name"] for m in doc["calibration"]["metrics"]} >= {"avg_run_time_gpu", "fail_rate_gpu"}


def test_same_seed_gives_identical_files(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for path in (a, b):  # with the (default) progress bar: it must not leak into the file or fail off a TTY
        assert main(["synth", "-n", "800", "-s", "9", "--out", str(path)]) == 0
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(("extra", "message"), [
    (["--profile", "nope"], "unknown synthetic profile"),
    (["--load", "0"], "target_load"),
    (["--start", "yesterday"], "--start"),
], ids=["profile", "load", "start"])
def test_bad_options_exit_2_with_one_line(tmp_path, capsys, extra, message):
    out = tmp_path / "jobs.parquet"
    assert main(["synth", "-n", "10", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_a_missing_output_folder_is_created(tmp_path):
    """Like every --out (features.outputs): the folder is created, with its parents."""
    assert main(["synth", "-n", "10", "--out", str(tmp_path / "no" / "jobs.parquet"), "--no-progress"]) == 0
    assert (tmp_path / "no" / "jobs.parquet").is_file()
