"""openb reader: the hand-written ``tests/fixtures/openb/pod_list.csv`` (written from the openb
columns, see tests/fixtures/README.md) and the real pod list in shared data."""

from __future__ import annotations

import pandas as pd
import pytest

from features.sources import TRACE_EPOCH_TS, get_reader

from .conftest import FIXTURES, ingest_into

T0 = TRACE_EPOCH_TS


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    return ingest_into(tmp_path_factory.mktemp("openb"), "openb", [FIXTURES / "openb/pod_list.csv"])


@pytest.mark.parametrize(
    "job_id, state, censored, num_gpus, gpu_milli, start, end, duration",
    [
        ("pod-a", "COMPLETED", False, 1, 460, 150, 1100, 950),
        ("pod-b", "FAILED", False, 2, 1000, 260, 700, 440),
        ("pod-c", "RUNNING", True, 0, None, 310, None, 5000 - 310),  # log end = latest time in the file
        ("pod-d", "PENDING", True, 1, 250, None, None, None),
    ],
)
def test_phases(pods, job_id, state, censored, num_gpus, gpu_milli, start, end, duration):
    row = pods.job(job_id)
    assert (row["state"], row["censored"], row["num_gpus"]) == (state, censored, num_gpus)
    for col, want in (("gpu_milli", gpu_milli), ("duration_s", duration)):
        assert (want is None and pd.isna(row[col])) or row[col] == want
    for col, want in (("start_ts", start), ("end_ts", end)):
        assert (want is None and pd.isna(row[col])) or row[col] == T0 + want


def test_request_columns(pods):
    row = pods.job("pod-b")
    assert (row["cpus"], row["mem_mib"], row["tier"], row["gpu_type"]) == (16.0, 32768.0, "BE", "V100M16|V100M32")
    assert row["submit_ts"] == T0 + 200 and pods.job("pod-c")["deletion_ts"] == T0 + 5000


@pytest.mark.parametrize(
    "job_id, reason",
    [("pod-e", "gpu_milli outside 1..1000"), ("pod-f", "unknown state"), ("pod-g", "unparseable cpu_milli")],
)
def test_rejects(pods, job_id, reason):
    assert pods.reason(job_id) == reason


def test_log_end_from_a_first_pass():
    assert get_reader("openb").log_end_hint([FIXTURES / "openb/pod_list.csv"]) == T0 + 5000


@pytest.mark.shared_data
def test_real_pod_list(tmp_path, shared_file):
    got = ingest_into(tmp_path, "openb", [shared_file("openb-2023/openb_pod_list_default.csv")])
    assert got.summary.rows_read == got.summary.rows_kept == 5706
    assert got.summary.censored == 3579 + 548  # Running + Pending pods
    counts = got.jobs["state"].value_counts().to_dict()
    assert counts == {"RUNNING": 3579, "FAILED": 1438, "PENDING": 548, "COMPLETED": 141}
    shared = got.jobs[got.jobs["gpu_milli"] < 1000]
    assert len(shared) and (shared["num_gpus"] == 1).all()  # GPU sharing only on single-GPU pods
    running = got.jobs[got.jobs["state"] == "RUNNING"]
    assert running["end_ts"].isna().all() and (running["duration_s"] >= 0).all()
    assert got.summary.log_end == "2020-05-29T08:09:20Z"  # epoch + 12,902,960 s, the largest time in the file
