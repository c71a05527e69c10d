"""Kueue reader. No public Workload export is in shared data: ``tests/fixtures/kueue/workloads.json``
was written by hand from the Workload CRD in ../shared/data/kueue-crds (v1beta1 and v1beta2), and
the well-formed items are checked against that CRD's OpenAPI schema below."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pandas as pd
import pytest
import yaml

from features.sources.kueue import parse_quantity

from .conftest import FIXTURES, ingest_into

BAD_ITEMS = {"not-a-workload", "job-bad-quantity"}


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def workloads(tmp_path_factory):
    return ingest_into(tmp_path_factory.mktemp("kueue"), "kueue", [FIXTURES / "kueue/workloads.json"])


@pytest.mark.parametrize(
    "job_id, state, gpus, cpus, mem_mib, gpu_type, tier, start, end",
    [
        ("team-a/job-train-llama-5c8f1", "COMPLETED", 16, 2 + 2 * 48, (4 + 2 * 512) * 1024, "A100-80GB", "production",
         "2024-05-01T10:01:30", "2024-05-01T12:00:00"),
        # init container (2 CPUs) outweighs the 0.75 CPUs of the two containers; GPU model from the node selector
        ("team-b/job-ft-oom-7d2a0", "OUT_OF_MEMORY", 1, 2, 16 * 1024 + 512, "H100-80GB", "research",
         "2024-05-01T11:00:05", "2024-05-01T11:20:05"),
        # status.resourceRequests wins over the pod template
        ("team-a/job-long-run-1a2b3", "RUNNING", 4, 32, 256 * 1024, "H100-80GB", "research", "2024-05-01T12:30:00",
         None),
        ("team-c/job-waiting-9f9f9", "PENDING", 6, 24, 3 * 64e9 / 2**20, None, None, None, None),
        # evicted for exceeding maximumExecutionTimeSeconds; start = eviction - accumulated execution time
        ("team-b/job-too-long-42", "TIMEOUT", 1, 4, 32 * 1024, None, None, "2024-05-01T14:00:00",
         "2024-05-01T15:00:00"),
        ("team-c/job-preempted-77", "PREEMPTED", 1, None, None, None, None, None, "2024-05-01T09:15:00"),
    ],
)
def test_workloads(workloads, job_id, state, gpus, cpus, mem_mib, gpu_type, tier, start, end):
    row = workloads.job(job_id)
    assert (row["state"], row["num_gpus"]) == (state, gpus)
    want = {"cpus": cpus, "mem_mib": mem_mib, "gpu_type": gpu_type, "tier": tier,
            "start_ts": ts(start) if start else None, "end_ts": ts(end) if end else None}
    for col, value in want.items():
        if value is None:
            assert pd.isna(row[col]), col
        else:
            assert row[col] == (pytest.approx(value) if isinstance(value, float) else value), col


def test_queue_team_and_extras(workloads):
    row = workloads.job("team-a/job-train-llama-5c8f1")
    assert (row["team"], row["queue"], row["cluster_queue"], row["time_limit_s"]) == (
        "team-a", "team-a-queue", "cq-gpu", 86400)
    assert row["submit_ts"] == ts("2024-05-01T10:00:00") and pd.isna(row["user"])
    assert workloads.job("team-a/job-long-run-1a2b3")["evictions"] == 2
    running = workloads.job("team-a/job-long-run-1a2b3")
    assert running["censored"] and running["duration_s"] == ts("2024-05-01T15:00:00") - ts("2024-05-01T12:30:00")


@pytest.mark.parametrize(
    "job_id, reason",
    [("team-a/job-bad-quantity", "unparseable resource request: not a Kubernetes quantity: 'lots'"),
     ("team-a/job-no-timestamp", "missing or unparseable submit time")],
)
def test_rejects(workloads, job_id, reason):
    assert workloads.reason(job_id) == reason


def test_non_workload_items_are_rejected(workloads):
    assert "not a Workload (kind 'ConfigMap')" in workloads.summary.rejected_by_reason


@pytest.mark.parametrize(
    "text, value",
    [("500m", 0.5), ("2", 2.0), (4, 4.0), ("64Gi", 64 * 2**30), ("64G", 64e9), ("1.5Ki", 1536.0), ("1e3", 1000.0),
     ("100u", 1e-4)],
)
def test_quantities(text, value):
    assert math.isclose(parse_quantity(text), value)


@pytest.mark.parametrize("text", ["lots", "5 Gi", "Gi", ""])
def test_bad_quantities(text):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


@pytest.mark.shared_data
def test_fixture_matches_the_real_crd(shared_file):
    jsonschema = pytest.importorskip("jsonschema")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 19k lines: libyaml when available
    crd = yaml.load(shared_file("kueue-crds/kueue.x-k8s.io_workloads.yaml").read_text(), Loader=loader)
    schemas = {f"kueue.x-k8s.io/{v['name']}": v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
    validators = {k: jsonschema.validators.validator_for(v)(v) for k, v in schemas.items()}
    items = json.loads((FIXTURES / "kueue/workloads.json").read_text())["items"]
    checked = 0
    for item in items:
        if item["metadata"]["name"] in BAD_ITEMS:
            continue
        validators[item["apiVersion"]].validate(item)
        checked += 1
    assert checked == len(items) - len(BAD_ITEMS)
