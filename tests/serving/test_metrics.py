"""What an operator alerts on is in ``/metrics``: decision latency, fallback in use, model age, the
outbox backlog and its oldest undelivered decision."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from predictor.store.outbox import claim_due, enqueue_decision, mark_delivered, mark_failed
from serving.metrics import OutboxBacklog, ServiceMetrics
from tests.serving.conftest import auth

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_decision_latency_and_fallback(client: TestClient) -> None:
    client.post("/v1/score", json={"jobs": [{"job_id": "a", "num_gpus": 1}]}, headers=auth("scheduler"))
    client.post("/v1/jobs", json={"job_id": "c", "num_gpus": 1}, headers=auth("scheduler"))
    client.patch("/v1/jobs/c", json={"num_gpus": 2}, headers=auth("scheduler"))
    got = _samples(client.get("/metrics").text)
    assert got[("predictor_decision_duration_seconds_count", (("source", "score"),))] == 1
    assert got[("predictor_decision_duration_seconds_count", (("source", "queue"),))] == 2
    assert got[("predictor_decision_duration_seconds_sum", (("source", "queue"),))] > 0
    assert got[("predictor_model_fallback", ())] == 1
    assert not [k for k in got if k[0] == "predictor_model_age_seconds"]  # the fallback has no age


def test_outbox_backlog_and_oldest_undelivered(client: TestClient) -> None:
    db = client.service.db  # type: ignore[attr-defined]
    now = time.time()
    with db.session() as s:
        for i, age in enumerate((900.0, 300.0, 60.0)):
            enqueue_decision(s, "kueue", f"team/job-{i}", {"priority": i}, f"k{i}", now=now - age)
        enqueue_decision(s, "slurm", "7", {"priority": 1}, "s7", now=now - 30)
        s.commit()
    with db.session() as s:
        first = claim_due(s, "kueue", limit=1, now=now)
        s.commit()
    with db.session() as s:
        mark_delivered(s, first[0].id)  # the 900 s one reached Kueue
        s.commit()
    with db.session() as s:
        [slurm] = claim_due(s, "slurm", limit=1, now=now)
        mark_failed(s, slurm.id, "rejected", retry_at=None)  # given up
        s.commit()
    got = _samples(client.get("/metrics").text)
    assert got[("predictor_outbox_items", (("status", "pending"), ("target", "kueue")))] == 2
    assert got[("predictor_outbox_items", (("status", "delivered"), ("target", "kueue")))] == 1
    assert got[("predictor_outbox_items", (("status", "dead"), ("target", "slurm")))] == 1
    assert 300 <= got[("predictor_outbox_oldest_pending_age_seconds", (("target", "kueue"),))] < 400
    assert got[("predictor_outbox_oldest_pending_age_seconds", (("target", "slurm"),))] == 0


def test_model_age_counts_from_registration() -> None:
    clock = [10_000.0]
    metrics = ServiceMetrics(lambda: {}, lambda: [OutboxBacklog("kueue", {"pending": 1}, 9_000.0)], clock=lambda: clock[0])
    metrics.set_model("job-predictor/3", False, created_ts=6_400.0)
    got = _samples(metrics.render().decode())
    assert got[("predictor_model_age_seconds", ())] == 3_600.0 and got[("predictor_model_fallback", ())] == 0
    assert got[("predictor_outbox_oldest_pending_age_seconds", (("target", "kueue"),))] == 1_000.0
    clock[0] += 60
    assert _samples(metrics.render().decode())[("predictor_model_age_seconds", ())] == 3_660.0
    metrics.set_model("fallback", True)
    assert not [k for k in _samples(metrics.render().decode()) if k[0] == "predictor_model_age_seconds"]


def test_registration_time_read_from_a_real_registry(client: TestClient, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from predictor.engine.model_slot import LoadedModel

    service = client.service  # type: ignore[attr-defined]
    registry = MlflowClient(tracking_uri=service.settings.mlflow_tracking_uri)
    registry.create_registered_model("job-predictor")
    (tmp_path / "model").mkdir()
    version = registry.create_model_version("job-predictor", str(tmp_path / "model"))
    before = time.time()
    service.on_model_change(LoadedModel(predictor=None, version=f"job-predictor/{version.version}",  # type: ignore[arg-type]
                                        fallback=False, fallback_reason=None, loaded_at=before))
    got = _samples(client.get("/metrics").text)
    assert got[("predictor_model_fallback", ())] == 0
    assert 0 <= got[("predictor_model_age_seconds", ())] < time.time() - version.creation_timestamp / 1000 + 1


def test_the_compile_of_the_model_in_use_is_a_gauge(client: TestClient) -> None:
    from predictor.engine.model_slot import Warmup

    slot = client.service.engine.model  # type: ignore[attr-defined]
    got = _samples(client.get("/metrics").text)
    assert got[("predictor_model_compiling", ())] == 0
    assert not [k for k in got if k[0] == "predictor_model_boosters"]  # nothing compiled or compiling
    slot.warmup = Warmup(slot.current.version, False, {"boosters": 5, "compiled": 2})
    got = _samples(client.get("/metrics").text)
    assert got[("predictor_model_compiling", ())] == 1
    assert got[("predictor_model_boosters", (("state", "total"),))] == 5
    assert got[("predictor_model_boosters", (("state", "compiled"),))] == 2
    assert client.get("/v1/models", headers=auth("scheduler")).json()["compiling"] is True
    slot.warmup = Warmup(slot.current.version, True, {"boosters": 5, "compiled": 5})
    got = _samples(client.get("/metrics").text)
    assert got[("predictor_model_compiling", ())] == 0
    assert got[("predictor_model_boosters", (("state", "compiled"),))] == 5
    slot.warmup = Warmup("job-predictor/99", False, {"boosters": 5, "compiled": 0})  # another version's
    assert client.get("/v1/models", headers=auth("scheduler")).json()["compiling"] is False
