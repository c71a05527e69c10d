"""``predictor sync --metrics-bind``: the loop's passes, errors and outbox on its own /metrics, read
over HTTP from prometheus_client's server while the loop runs against the Kubernetes API emulator."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from predictor.cli import main
from tests.deploy.test_kubernetes_discovery import _kubeconfig
from tests.predictor.adapters.kube_emulator import kube_emulator
from tests.predictor.adapters.kueue_objects import workload

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.timeout(120)
def test_a_pass_and_an_unreachable_cluster_are_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("nodes:\n  - {name: 'n{i}', count: 2, gpu_type: A100-80GB, gpus: 8, nvlink_islands: all}\n")
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    args = ["sync", "--target", "kueue", "--once", "--decider", "rules", "--inventory", str(inventory), "--retries", "1"]
    with kube_emulator() as (_, api):
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, "vision", "workloads", workload("vision", "job-a", gpus=4), _preload_content=False)
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", api.configuration.host)))
        port = _free_port()
        assert main([*args, "--metrics-bind", f"127.0.0.1:{port}"]) == 0
        got = _scrape(port)  # the server thread outlives the --once pass in this process
    kueue = (("target", "kueue"),)
    assert got[("predictor_sync_passes_total", (("outcome", "ok"), *kueue))] == 1
    assert got[("predictor_sync_jobs", (("state", "pending"), *kueue))] == 1
    assert got[("predictor_sync_errors_total", (("kind", "unavailable"), *kueue))] == 0
    assert got[("predictor_sync_last_success_timestamp_seconds", kueue)] > 0
    assert got[("predictor_outbox_items", (("status", "delivered"), *kueue))] == 1  # its decision, delivered

    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "gone", "http://127.0.0.1:1")))
    port = _free_port()
    assert main([*args, "--metrics-bind", f"127.0.0.1:{port}"]) == 1
    got = _scrape(port)
    assert got[("predictor_sync_errors_total", (("kind", "unavailable"), *kueue))] == 1
    assert got[("predictor_sync_passes_total", (("outcome", "unavailable"), *kueue))] == 1
    assert ("predictor_sync_last_success_timestamp_seconds", kueue) not in got


def test_a_bad_bind_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("nodes:\n  - {name: n1, gpu_type: A100-80GB, gpus: 8}\n")
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")))
    assert main(["sync", "--target", "kueue", "--once", "--dry-run", "--decider", "rules", "--inventory",
                 str(inventory), "--metrics-bind", "9108"]) == 2
    assert "--metrics-bind: expected host:port" in capsys.readouterr().err
