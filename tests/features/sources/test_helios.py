"""Helios reader. No public Helios sample is in shared data: ``tests/fixtures/helios/cluster_log.csv``
was written by hand from the HeliosData README schema (its three example rows come first)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from .conftest import FIXTURES, ingest_into


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def helios(tmp_path_factory):
    return ingest_into(tmp_path_factory.mktemp("helios"), "helios", [FIXTURES / "helios/cluster_log.csv"])


@pytest.mark.parametrize(
    "job_id, state, gpus, cpus, nodes, team, duration",
    [
        ("1425511", "COMPLETED", 1, 1, 1, "vcJkd", 36848),
        ("1425512", "FAILED", 4, 16, 1, "vchbv", 249),
        ("1425513", "CANCELLED", 1, 1, 1, "vcpDC", 675233),
        ("1425514", "NODE_FAIL", 8, 64, 2, "vcpDC", 3300),
    ],
)
def test_rows(helios, job_id, state, gpus, cpus, nodes, team, duration):
    row = helios.job(job_id)
    assert (row["state"], row["num_gpus"], row["cpus"], row["num_nodes"], row["team"]) == (state, gpus, cpus, nodes, team)
    assert row["duration_s"] == duration  # equals the trace's own duration column


def test_dates_are_wall_clock_in_the_given_zone(helios, tmp_path):
    assert helios.job("1425511")["submit_ts"] == ts("2020-06-09T18:41:01")
    shanghai = ingest_into(tmp_path, "helios", [FIXTURES / "helios/cluster_log.csv"], timezone="Asia/Shanghai")
    assert shanghai.job("1425511")["submit_ts"] == ts("2020-06-09T18:41:01") - 8 * 3600


@pytest.mark.parametrize("job_id, reason", [("1425515", "end before start"), ("1425516", "unparseable submit_time")])
def test_rejects(helios, job_id, reason):
    assert helios.reason(job_id) == reason
