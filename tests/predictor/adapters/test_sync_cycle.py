"""One sync pass end to end without a cluster of our own: the Kueue adapter against the API emulator,
decisions from the real service (in process, fallback predictor) or the rules layer, the real outbox."""

from __future__ import annotations

import warnings

import pytest
import yaml
from kubernetes import client

from predictor.adapters.kueue.adapter import KueueAdapter
from predictor.adapters.retry import RetryPolicy
from predictor.adapters.sync_cycle import (
    EngineDecisions,
    ServiceDecisions,
    job_request,
    run_cycle,
)
from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.presets import load_policy
from predictor.store import Database
from predictor.store.outbox import outbox_counts
from serving.settings import Settings, TokenSpec
from tests.predictor.adapters.kube_emulator import kube_emulator
from tests.predictor.adapters.kueue_objects import workload

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NOW = 1_795_990_000.0
TOKEN = TokenSpec(name="sync", role="scheduler", token="sync-token-0123456789")


@pytest.fixture
def kube():
    with kube_emulator() as (_, api):
        custom = client.CustomObjectsApi(api)
        for obj in (workload("vision", "job-a", gpus=2), workload("nlp", "job-b", gpus=8),
                    workload("nlp", "job-c", gpus=4, admitted=True)):
            custom.create_namespaced_custom_object(GROUP, VERSION, obj["metadata"]["namespace"], "workloads", obj,
                                                   _preload_content=False)
        yield KueueAdapter(api, retry=RetryPolicy(max_attempts=1), clock=lambda: NOW), custom


@pytest.fixture
def db(tmp_path):
    database = Database(f"sqlite:///{tmp_path / 'state.db'}")
    database.upgrade()
    yield database
    database.dispose()


def _priorities(custom):
    items = custom.list_cluster_custom_object(GROUP, VERSION, "workloads")["items"]
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["spec"]["priority"] for o in items}


def test_job_request_drops_nulls_and_keeps_the_request():
    body = job_request({"job_id": "vision/job-a", "num_gpus": 2.0, "team": "vision", "cpus": float("nan"),
                        "submit_ts": 100.0, "queue": None})
    assert body == {"job_id": "vision/job-a", "num_gpus": 2, "team": "vision", "submit_ts": 100.0}


def _rules_engine(inventory):
    from models.fixed import NullPredictor
    from predictor.engine.engine import Engine
    from predictor.engine.model_slot import ModelSlot

    slot = ModelSlot.fixed(NullPredictor(), "none", fallback_reason="rules only")
    return Engine(model=slot, policy=load_policy(None), inventory=inventory)


def test_rules_decisions_applied_through_the_outbox(kube, db):
    adapter, custom = kube
    source = EngineDecisions(_rules_engine(homogeneous_inventory(16)))
    dry = run_cycle(adapter, source, None, now=NOW, dry_run=True)
    assert (dry.pending, dry.running) == (2, 1) and set(dry.planned) == {"vision/job-a", "nlp/job-b"}
    assert _priorities(custom) == {"vision/job-a": 0, "nlp/job-b": 0, "nlp/job-c": 0}  # dry run: untouched
    report = run_cycle(adapter, source, db, now=NOW)
    want = {d.job_id: d.kueue_priority for d in report.decisions}
    assert all(r.ok for r in report.applied) and want
    assert {k: v for k, v in _priorities(custom).items() if k in want} == want
    with db.session() as s:
        assert outbox_counts(s, "kueue") == {"delivered": 2}


def test_a_pending_job_never_gets_the_gpus_a_running_job_holds(kube):
    adapter, _ = kube
    engine = _rules_engine(homogeneous_inventory(16))
    report = run_cycle(adapter, EngineDecisions(engine), None, now=NOW, dry_run=True)
    assert report.model_version == "none" and report.fallback_reason == "rules only"
    result = engine.decide_cluster(adapter.pending_jobs(), adapter.running_jobs(), NOW)
    held = set(result.picture.running.alloc_gpus.tolist())
    assert len(held) == 4 and result.picture.running.job_id.tolist() == ["nlp/job-c"]
    for d in result.decisions:
        if d.placement is not None:
            taken = {result.picture.layout.gpu_index(n, g) for n, idx in d.placement.gpu_indices for g in idx}
            assert not taken & held, d.job_id


def test_service_decisions_through_the_real_app(kube, db, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    from serving.app import create_app
    from serving.service import build_service
    from tests.serving.doubles import no_model_slot

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'service.db'}",
                        mlflow_tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", tokens=[TOKEN])
    adapter, custom = kube
    with TestClient(create_app(service=build_service(settings, model=no_model_slot()))) as http:
        source = ServiceDecisions("http://testserver", TOKEN.token, http=http)
        report = run_cycle(adapter, source, db, now=NOW)
        tracked = {j["job_id"]: j for j in http.get("/v1/queue").json()["jobs"]}
    assert {"vision/job-a", "nlp/job-b"} <= set(tracked)
    want = {d.job_id: d.kueue_priority for d in report.decisions}
    assert set(want) == {"vision/job-a", "nlp/job-b"}
    assert all(r.ok for r in report.applied)
    assert {k: v for k, v in _priorities(custom).items() if k in want} == want


def _kubeconfig(path, server: str):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": "not-checked"}}]}))
    return path


def test_sync_cli_against_the_emulator_through_a_kubeconfig(tmp_path, monkeypatch, capsys):
    from predictor.cli import main

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("nodes:\n  - {name: 'n{i}', count: 2, gpu_type: A100-80GB, gpus: 8, nvlink_islands: all}\n")
    with kube_emulator() as (_, api):
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(GROUP, VERSION, "vision", "workloads", workload("vision", "job-a", gpus=4),
                                               _preload_content=False)
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", api.configuration.host)))
        monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
        args = ["sync", "--target", "kueue", "--once", "--decider", "rules", "--inventory", str(inventory)]
        assert main([*args, "--dry-run"]) == 0
        assert 'vision/job-a: would run: PATCH workloads.kueue.x-k8s.io vision/job-a {"spec":{"priority":' in (
            capsys.readouterr().out)
        assert main(args) == 0
        assert "vision/job-a: ok, 1 change(s)" in capsys.readouterr().out
        assert custom.get_namespaced_custom_object(GROUP, VERSION, "vision", "workloads", "job-a")["spec"]["priority"] > 0


def test_sync_cli_reports_an_unreachable_api_server(tmp_path, monkeypatch, capsys):
    from predictor.cli import main

    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("nodes:\n  - {name: n1, gpu_type: A100-80GB, gpus: 8}\n")
    assert main(["sync", "--target", "kueue", "--once", "--dry-run", "--decider", "rules", "--inventory",
                 str(inventory), "--retries", "2"]) == 1
    assert "error: kueue unavailable: LIST workloads" in capsys.readouterr().err


def test_engine_decisions_applied_through_the_outbox(kube, db):
    from predictor.engine.engine import Engine
    from tests.serving.doubles import no_model_slot

    adapter, custom = kube
    engine = Engine(model=no_model_slot(), policy=load_policy(None), inventory=homogeneous_inventory(16))
    report = run_cycle(adapter, EngineDecisions(engine), db, now=NOW)
    want = {d.job_id: d.kueue_priority for d in report.decisions}
    assert set(want) == {"vision/job-a", "nlp/job-b"} and all(r.ok for r in report.applied)
    assert {k: v for k, v in _priorities(custom).items() if k in want} == want
