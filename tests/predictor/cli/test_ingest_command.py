"""``predictor ingest`` run in-process through ``predictor.cli.main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from predictor.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_json_summary(tmp_path, capsys):
    out = tmp_path / "jobs.parquet"
    code = main(["ingest", "--format", "swf", str(FIXTURES / "swf/edge_cases.swf"), "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["rows_read"], summary["rows_kept"], summary["rows_rejected"]) == (10, 5, 5)
    assert summary["output"] == str(out) and out.exists() and Path(summary["rejects_output"]).exists()


def test_table_summary(tmp_path, capsys):
    code = main(["ingest", "-f", "sacct", str(FIXTURES / "sacct/edge_cases.txt"), "-o", str(tmp_path / "j.parquet")])
    assert code == 0
    text = capsys.readouterr().out
    for needle in ("rows read", "22", "duplicate job_id", "censored", "2024-03-01T10:00:00Z", "a100 2", "GPU jobs"):
        assert needle in text


def test_auto_format_and_options(tmp_path, capsys):
    code = main(["ingest", "-f", "auto", str(FIXTURES / "openb/pod_list.csv"), "-o", str(tmp_path / "j.parquet"),
                 "--json", "--log-end", "2020-01-01T02:30:00Z", "--chunk-rows", "2"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["format"] == "openb" and summary["log_end"] == "2020-01-01T02:30:00Z"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "nope", "{fixture}"], "unknown format 'nope'; known formats: sacct, swf, openb, pai, kueue, "
                                           "philly, helios, philly-derived, csv"),
        (["--format", "swf", "{tmp}/missing.swf"], "input not found: {tmp}/missing.swf"),
        (["--format", "openb", "{fixture}"], "helios/cluster_log.csv: not in 'openb' format: missing column(s) name, cpu_milli"),
        (["--format", "swf", "{tmp}"], "input is not a file"),
        (["--format", "helios", "{fixture}", "--log-end", "soon"], "--log-end: not an ISO 8601 time: 'soon'"),
        (["--format", "helios", "{fixture}", "--timezone", "Mars/Base"], "unknown timezone 'Mars/Base'"),
    ],
    ids=["unknown-format", "missing-file", "wrong-columns", "directory", "bad-log-end", "bad-timezone"],
)
def test_errors_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    fixture = str(FIXTURES / "helios/cluster_log.csv")
    argv = ["ingest", *[a.format(fixture=fixture, tmp=tmp_path) for a in args], "--out", str(tmp_path / "o.parquet")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o.parquet").exists()


def test_ingest_is_listed_in_help(capsys):
    assert main(["--help"]) == 0
    assert "ingest" in capsys.readouterr().out
