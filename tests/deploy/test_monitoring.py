"""The alerting rules and the Grafana dashboard: promtool accepts the rules and their unit tests pass,
every dashboard query parses, every metric they name is one the service exports, and the docs say
what each alert means."""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path

import pytest
import yaml

from tests.deploy.manifests import DEPLOY, ROOT
from tests.serving.conftest import auth

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

MONITORING = DEPLOY / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
#: Metrics of other exporters the rules use (kube-state-metrics, node_exporter's systemd collector).
EXTERNAL = {"kube_job_status_failed", "node_systemd_unit_state"}
#: Grafana's interval variables, replaced by a duration before promtool reads the query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
_METRIC = re.compile(r"\b((?:predictor|kube|node)_[a-z_]+)\b")


def _promtool(promtool: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


def _alert_rules() -> list[dict]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def _dashboard_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]


def test_rules_pass_promtool_check_and_unit_tests(promtool: str) -> None:
    checked = _promtool(promtool, "check", "rules", ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_alert_rules())} rules found" in checked.stdout
    tested = _promtool(promtool, "test", "rules", "alerts-test.yaml", cwd=MONITORING)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_severity_summary_and_docs() -> None:
    docs = (ROOT / "docs" / "deployment.md").read_text()
    for rule in _alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert f"`{rule['alert']}`" in docs, f"docs/deployment.md does not explain {rule['alert']}"


def test_dashboard_loads_and_every_query_parses(promtool: str, tmp_path: Path) -> None:
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) and doc["uid"] and doc["schemaVersion"] >= 36
    queries = _dashboard_queries()
    assert len(queries) >= 10
    # promtool has no "check query" here: each query becomes a recording rule, which it parses
    rules = []
    for k, (_, expr) in enumerate(queries):
        for var, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"unreplaced variable in {expr}"
        rules.append({"record": f"dashboard:query_{k}", "expr": expr})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = _promtool(promtool, "check", "rules", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


def _exported_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            name, kind = m.groups()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names


@pytest.mark.timeout(120)
def test_rules_and_dashboard_name_only_exported_metrics(client: TestClient) -> None:
    client.post("/v1/score", json={"jobs": [{"job_id": "a", "num_gpus": 1}]}, headers=auth("scheduler"))
    from predictor.adapters.metrics import SyncMetrics

    exported = _exported_names(client.get("/metrics").text)
    exported |= _exported_names(SyncMetrics("kueue").render().decode())  # the sync loop's own /metrics
    used = {m for rule in _alert_rules() for m in _METRIC.findall(rule["expr"])}
    used |= {m for _, expr in _dashboard_queries() for m in _METRIC.findall(expr)}
    assert {"predictor_outbox_oldest_pending_age_seconds", "predictor_decision_duration_seconds_bucket",
            "predictor_sync_errors_total", "predictor_sync_last_success_timestamp_seconds"} <= used
    unknown = used - exported - EXTERNAL
    assert not unknown, f"named in rules or dashboard but not exported: {sorted(unknown)}"
