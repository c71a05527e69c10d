"""A Kueue Workload becomes a job row in one place: the adapter reads it as the ingest reader does."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from features.ingest import ingest
from features.schema import COLUMNS
from predictor.adapters.kueue.workloads import workload_from_object, workload_rows

AMD_WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {"name": "job-mi300-ft-1", "creationTimestamp": "2024-05-01T10:00:00Z"},  # no namespace
    "spec": {"queueName": "user-queue", "priorityClassRef": {"name": "research"}, "podSets": [{
        "name": "main", "count": 2,
        "template": {"spec": {"activeDeadlineSeconds": 7200, "containers": [{
            "name": "train", "resources": {"requests": {"amd.com/gpu": "4", "cpu": "16", "memory": "64Gi"}}}]}}}]},
    "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"amd.com/gpu": "AMD_Instinct_MI300X"}}]},
        "conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": "2024-05-01T10:05:00Z"}]},
}


def test_adapter_rows_equal_reader_rows(tmp_path: Path) -> None:
    path = tmp_path / "workloads.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [AMD_WORKLOAD]}))
    ingest("kueue", [path], tmp_path / "jobs.parquet")
    ingested = pd.read_parquet(tmp_path / "jobs.parquet").set_index("job_id")
    now = pd.Timestamp("2024-05-01T11:05:00Z").timestamp()
    rows = workload_rows([workload_from_object(AMD_WORKLOAD)], now=now).set_index("job_id")
    assert list(rows.index) == list(ingested.index) == ["default/job-mi300-ft-1"]
    row = rows.iloc[0]
    assert (row["num_gpus"], row["gpu_type"], row["time_limit_s"], row["state"]) == (8, "MI300X", 7200, "RUNNING")
    assert row["duration_s"] == 3600
    same = [c for c in COLUMNS if c not in ("job_id", "duration_s", "source")]
    def values(series: pd.Series) -> list:
        return [None if pd.isna(v) else v for v in series[same].tolist()]

    assert values(row) == values(ingested.iloc[0])
