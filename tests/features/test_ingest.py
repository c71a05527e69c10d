"""The ingest pipeline: summary, duplicates across chunks, end of log, atomic outputs, load_jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import features.ingest as ingest_module
from features.errors import InputError
from features.ingest import ingest, load_jobs, rejects_path
from features.sources import sniff_format

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _csv(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _row(job_id: str, **kw) -> dict:
    base = {"job_id": job_id, "user": "u", "submit_ts": 100.0, "start_ts": 110.0, "end_ts": 200.0, "state": "COMPLETED"}
    base.update(kw)
    return base


def test_summary_of_the_sacct_fixture(tmp_path):
    summary = ingest("sacct", [FIXTURES / "sacct/edge_cases.txt"], tmp_path / "jobs.parquet")
    assert (summary.rows_read, summary.rows_kept, summary.rows_rejected) == (22, 11, 11)
    assert summary.rejected_by_reason["duplicate job_id"] == 1 and sum(summary.rejected_by_reason.values()) == 11
    assert summary.censored == 3  # running 1003, pending 1004 and the pending array 2000_[3-5]
    assert (summary.users, summary.teams, summary.gpu_jobs) == (8, 4, 9)
    assert summary.gpu_types == {"a100": 2, "H100-80GB": 1, "V100": 1}
    assert summary.first_submit == "2024-03-01T10:00:00Z" and summary.log_end == "2024-03-07T10:20:00Z"
    assert json.loads(json.dumps(summary.to_dict()))["rows_kept"] == 11


def test_outputs_are_parquet_with_rejects_beside(tmp_path):
    out = tmp_path / "sub" / "jobs.parquet"
    ingest("swf", [FIXTURES / "swf/edge_cases.swf"], out)
    assert rejects_path(out) == tmp_path / "sub" / "jobs.rejects.parquet"
    rejects = pd.read_parquet(rejects_path(out))
    assert "reject_reason" in rejects and "raw" in rejects  # the malformed line's text is kept
    assert sorted(p.name for p in out.parent.iterdir()) == ["jobs.parquet", "jobs.rejects.parquet"]


def test_empty_rejects_file_is_still_written(tmp_path):
    out = tmp_path / "jobs.parquet"
    ingest("csv", [_csv(tmp_path / "in.csv", [_row("a")])], out)
    assert list(pd.read_parquet(rejects_path(out)).columns)[-1] == "reject_reason"


def test_duplicates_are_caught_across_chunks(tmp_path):
    rows = [_row("a"), _row("b"), _row("a", user="again"), _row("c"), _row("b")]
    out = tmp_path / "jobs.parquet"
    summary = ingest("csv", [_csv(tmp_path / "in.csv", rows)], out, chunk_rows=1)
    assert summary.rejected_by_reason == {"duplicate job_id": 2}
    assert sorted(load_jobs(out)["job_id"]) == ["a", "b", "c"]
    assert load_jobs(out).set_index("job_id").loc["a", "user"] == "u"  # the first one wins


def test_running_rows_wait_for_the_end_of_the_log(tmp_path):
    # the end of this log (t=1000) only appears in a later chunk than the running job
    rows = [_row("run", state="RUNNING", end_ts=None), _row("done", submit_ts=500.0, start_ts=600.0, end_ts=1000.0)]
    out = tmp_path / "jobs.parquet"
    summary = ingest("csv", [_csv(tmp_path / "in.csv", rows)], out, chunk_rows=1)
    running = load_jobs(out).set_index("job_id").loc["run"]
    assert running["censored"] and pd.isna(running["end_ts"]) and running["duration_s"] == 1000 - 110
    assert summary.censored == 1 and summary.log_end == "1970-01-01T00:16:40Z"


def test_explicit_log_end_wins(tmp_path):
    out = tmp_path / "jobs.parquet"
    ingest("openb", [FIXTURES / "openb/pod_list.csv"], out, log_end_ts=1_577_836_800.0 + 9000)
    assert load_jobs(out).set_index("job_id").loc["pod-c", "duration_s"] == 9000 - 310


def test_failed_run_leaves_nothing_half_written(tmp_path):
    broken = tmp_path / "jobs.json"
    good = json.loads((FIXTURES / "philly/cluster_job_log.json").read_text())[:3]
    broken.write_text(json.dumps(good)[:-1] + ', {"jobid": "x", "attempts": [}]')  # fails after good records
    out = tmp_path / "jobs.parquet"
    out.write_bytes(b"previous run")
    with pytest.raises(InputError, match="invalid JSON"):
        ingest("philly", [broken], out, chunk_rows=1)
    assert out.read_bytes() == b"previous run" and not rejects_path(out).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.json", "jobs.parquet"]  # no temp folder left


@pytest.mark.parametrize(
    "problem, match",
    [
        (lambda d: [d / "missing.swf"], "input not found"),
        (lambda d: [d], "input is not a file"),
        (lambda d: [], "no input files"),
    ],
)
def test_bad_inputs(tmp_path, problem, match):
    with pytest.raises(InputError, match=match):
        ingest("swf", problem(tmp_path), tmp_path / "out.parquet")


def test_corrupt_gzip_is_a_clear_error(tmp_path):
    bad = tmp_path / "log.swf.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate")
    with pytest.raises(InputError, match=r"cannot read .*log\.swf\.gz"):
        ingest("swf", [bad], tmp_path / "out.parquet")


@pytest.mark.parametrize(
    "rel, fmt",
    [
        ("sacct/edge_cases.txt", "sacct"),
        ("swf/edge_cases.swf", "swf"),
        ("openb/pod_list.csv", "openb"),
        ("pai/pai_job_table.csv", "pai"),
        ("kueue/workloads.json", "kueue"),
        ("philly/cluster_job_log.json", "philly"),
        ("helios/cluster_log.csv", "helios"),
    ],
)
def test_format_sniffing(rel, fmt):
    assert sniff_format(FIXTURES / rel) == fmt


def test_auto_format(tmp_path):
    summary = ingest("auto", [FIXTURES / "helios/cluster_log.csv"], tmp_path / "jobs.parquet")
    assert summary.format == "helios" and summary.rows_kept == 4


def test_unrecognised_file_for_auto(tmp_path):
    odd = tmp_path / "odd.txt"
    odd.write_text("hello\n")
    with pytest.raises(InputError, match="cannot tell its format; pass --format"):
        ingest("auto", [odd], tmp_path / "jobs.parquet")


def test_progress_bar_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ingest_module, "PROGRESS_MIN_BYTES", 0)
    summary = ingest("swf", [FIXTURES / "swf/edge_cases.swf"], tmp_path / "jobs.parquet", progress=True)
    assert summary.rows_kept == 5 and summary.input_bytes == (FIXTURES / "swf/edge_cases.swf").stat().st_size


def test_load_jobs_reads_csv_and_parquet(tmp_path):
    out = tmp_path / "jobs.parquet"
    ingest("helios", [FIXTURES / "helios/cluster_log.csv"], out)
    jobs = load_jobs(out)
    jobs.to_csv(tmp_path / "jobs.csv", index=False)
    pd.testing.assert_frame_equal(load_jobs(tmp_path / "jobs.csv").drop(columns=[]), jobs)
    with pytest.raises(InputError, match="input not found"):
        load_jobs(tmp_path / "nope.parquet")


def test_load_jobs_reports_a_bad_csv_value(tmp_path):
    path = _csv(tmp_path / "jobs.csv", [_row("a"), _row("b", cpus="many")])
    with pytest.raises(InputError, match=r"row 2: unparseable cpus"):
        load_jobs(path)
