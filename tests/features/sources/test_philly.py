"""Philly reader. No public Philly job log is in shared data: ``tests/fixtures/philly`` was written
by hand from the msr-fiddle/philly-traces README schema (its example job is the first record)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pandas as pd
import pytest

from .conftest import FIXTURES, ingest_into

LA = ZoneInfo("America/Los_Angeles")


def la(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=LA).timestamp()


@pytest.fixture(scope="module")
def philly(tmp_path_factory):
    return ingest_into(tmp_path_factory.mktemp("philly"), "philly", [FIXTURES / "philly/cluster_job_log.json"])


def test_attempts_fold_into_one_job(philly):
    row = philly.job("application_1506638472019_14199")
    assert (row["state"], row["user"], row["team"], row["attempts"]) == ("COMPLETED", "ce2f4c", "ee9e8c", 2)
    assert row["submit_ts"] == la("2017-10-07 01:11:39")
    assert row["start_ts"] == la("2017-10-07 01:12:09")  # first attempt's start
    assert row["end_ts"] == la("2017-10-09 06:53:12")  # last attempt's end
    assert (row["num_gpus"], row["num_nodes"]) == (8, 1)


@pytest.mark.parametrize(
    "job_id, state, gpus, nodes, censored",
    [
        ("application_1506638472019_14200", "CANCELLED", None, None, False),  # killed before any attempt
        ("application_1506638472019_14201", "FAILED", 8, 2, False),  # two servers x 4 GPUs
        ("application_1506638472019_14202", "RUNNING", 1, 1, True),  # last attempt without an end
    ],
)
def test_outcomes(philly, job_id, state, gpus, nodes, censored):
    row = philly.job(job_id)
    assert (row["state"], row["censored"]) == (state, censored)
    for col, want in (("num_gpus", gpus), ("num_nodes", nodes)):
        assert (want is None and pd.isna(row[col])) or row[col] == want


@pytest.mark.parametrize(
    "job_id, reason",
    [("application_1506638472019_14203", "completed without a start time"),
     ("application_1506638472019_14204", "unparseable submit time")],
)
def test_rejects(philly, job_id, reason):
    assert philly.reason(job_id) == reason


def test_json_lines_are_accepted(philly, tmp_path):
    import json

    records = json.loads((FIXTURES / "philly/cluster_job_log.json").read_text())
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    got = ingest_into(tmp_path, "philly", [lines])
    pd.testing.assert_frame_equal(got.jobs, philly.jobs)
