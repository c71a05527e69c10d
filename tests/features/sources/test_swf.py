"""SWF reader: the hand-written ``tests/fixtures/swf/edge_cases.swf`` (written from the SWF 2.2
definition, see tests/fixtures/README.md) and the two real Parallel Workloads Archive logs."""

from __future__ import annotations

import gzip
import math

import pandas as pd
import pytest

from features.sources import get_reader

from .conftest import FIXTURES, ingest_into

T0 = 1_000_000_000  # UnixStartTime of the fixture


@pytest.fixture(scope="module")
def edge_cases(tmp_path_factory):
    return ingest_into(tmp_path_factory.mktemp("swf"), "swf", [FIXTURES / "swf/edge_cases.swf"])


@pytest.mark.parametrize(
    "job_id, state, submit, start, end, cpus, mem_mib, limit, queue",
    [
        ("1", "COMPLETED", 0, 10, 110, 4, 4.0, 200, "1"),  # 1024 KB/proc x 4 procs
        ("2", "CANCELLED", 50, None, None, 8, None, 300, "1"),  # cancelled before it started: -1 wait/run
        ("3", "FAILED", 60, 65, 95, 2, None, None, "2"),  # requested procs -1: allocated 2
        ("4", "COMPLETED", 70, 70, 570, 8, None, 1000, "1"),  # summary line of a partial-execution job
        ("7", "COMPLETED", 100, 102, 142, 1, None, 100, "1"),
    ],
)
def test_fixture_jobs(edge_cases, job_id, state, submit, start, end, cpus, mem_mib, limit, queue):
    row = edge_cases.job(job_id)
    assert row["state"] == state and row["queue"] == queue
    assert row["submit_ts"] == T0 + submit
    for col, want in (("start_ts", start), ("end_ts", end)):
        assert (pd.isna(row[col]) and want is None) or row[col] == T0 + want
    assert row["cpus"] == cpus
    assert (pd.isna(row["mem_mib"]) and mem_mib is None) or row["mem_mib"] == mem_mib
    assert (pd.isna(row["time_limit_s"]) and limit is None) or row["time_limit_s"] == limit
    assert pd.isna(row["num_gpus"])  # SWF records no GPUs


def test_ids_come_from_the_numbered_fields(edge_cases):
    row = edge_cases.job("1")
    assert (row["user"], row["team"], row["job_name"], row["partition"]) == ("7", "3", "11", "1")


@pytest.mark.parametrize(
    "job_id, reason",
    [
        ("5", "missing state"),  # status -1: outcome unknown
        ("6", "malformed SWF line 14: expected 18 fields, found 9"),
        ("8", "non-positive time_limit_s"),
    ],
)
def test_fixture_rejects(edge_cases, job_id, reason):
    assert edge_cases.reason(job_id) == reason


def test_partial_executions_rejected_with_their_reason(edge_cases):
    partial = edge_cases.rejects[edge_cases.rejects["job_id"] == "4"]["reject_reason"].tolist()
    assert sorted(partial) == [
        f"SWF partial-execution record (status {s}) of job 4: the job is kept from its summary line" for s in (2, 3)]


def test_header_is_parsed():
    reader = get_reader("swf")
    list(reader.read([FIXTURES / "swf/edge_cases.swf"]))
    assert reader.header["UnixStartTime"] == "1000000000" and reader.header["MaxProcs"] == "64"


def test_gzip_and_plain_agree(edge_cases, tmp_path):
    packed = tmp_path / "edge.swf.gz"
    packed.write_bytes(gzip.compress((FIXTURES / "swf/edge_cases.swf").read_bytes()))
    got = ingest_into(tmp_path, "swf", [packed])
    pd.testing.assert_frame_equal(got.jobs, edge_cases.jobs)


def test_missing_unix_start_time_uses_the_trace_epoch(tmp_path):
    from features.sources import TRACE_EPOCH_TS

    path = tmp_path / "noheader.swf"
    path.write_text("1 5 1 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n")
    row = ingest_into(tmp_path, "swf", [path]).job("1")
    assert row["submit_ts"] == TRACE_EPOCH_TS + 5 and row["duration_s"] == 10


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "name, rows, kept, first_submit",
    [
        ("KTH-SP2-1996-2.1-cln.swf.gz", 27992, 27992, 843480031 + 599850),
        ("HPC2N-2002-2.1-cln.swf.gz", 202876, 201998, 1027839845 + 0),
    ],
)
def test_real_logs(tmp_path, shared_file, name, rows, kept, first_submit):
    got = ingest_into(tmp_path, "swf", [shared_file(f"swf/{name}")])
    assert (got.summary.rows_read, got.summary.rows_kept) == (rows, kept)
    assert got.jobs["submit_ts"].min() == first_submit
    assert set(got.summary.rejected_by_reason) <= {"missing state"}  # status -1 rows only
    assert not got.jobs["censored"].any()
    ran = got.jobs.dropna(subset=["start_ts", "end_ts"])
    assert (ran["duration_s"] == ran["end_ts"] - ran["start_ts"]).all()
    assert math.isclose(got.summary.gpu_jobs, 0)
