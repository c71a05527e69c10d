import json
import os

import numpy as np
import pytest

from predictor.capacity.inventory import homogeneous_inventory
from predictor.sim.metrics import METRIC_KEYS
from predictor.sim.predictions import NoPredictions
from predictor.sim.replay import replay
from predictor.sim.report import build_report, write_report
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows, ScriptedRules, decision, on


def _records():
    rows = JobRows().add("a", gpus=8, run=100, team="x").add("b", gpus=8, run=50, team="y", submit=10)
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(8)
    preds = NoPredictions().predict(table, inv)
    out = []
    for name, order in (("fifo", ("a", "b")), ("reverse", ("b", "a"))):
        first, second = order
        start_second = 100.0 if first == "a" else 60.0
        start_first = 0.0 if first == "a" else 10.0
        script = {start_first: [decision(first, "start", on("node-0000", 8))],
                  start_second: [decision(second, "start", on("node-0000", 8))]}
        rules = ScriptedRules(lambda view, s=script: s.get(view.now, []), name=name)
        out.append(replay(table, inv, rules, preds))
    return out


def test_report_json_has_the_issue_shape_and_is_strict_json(tmp_path):
    records = _records()
    json_path, html_path = write_report(records, {"jobs_file": "x.parquet"}, tmp_path)
    doc = json.loads(json_path.read_text())
    assert set(doc) == {"policies", "extra", "run"}
    assert list(doc["policies"]) == ["fifo", "reverse"]
    for metrics in doc["policies"].values():
        assert tuple(metrics) == METRIC_KEYS
    assert doc["extra"]["fifo"]["oom_avoided_vs_fifo"] == 0
    assert doc["run"] == {"jobs_file": "x.parquet"}
    json.loads(json_path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    umask = os.umask(0)
    os.umask(umask)
    assert json_path.stat().st_mode & 0o777 == 0o666 & ~umask  # an ordinary file, not mkstemp's 0600
    assert not list(tmp_path.glob(".*.tmp"))  # no temp file left behind


def test_nan_becomes_null():
    records = _records()
    doc = build_report(records, {"missing": float("nan"), "arr": np.float64(2.0)})
    assert doc["run"] == {"missing": None, "arr": 2.0}


def test_html_is_self_contained_with_every_plot_and_the_metric_table(tmp_path):
    _, html_path = write_report(_records(), {}, tmp_path)
    page = html_path.read_text()
    assert page.count("data:image/png;base64,") == 3
    assert "http://" not in page and "https://" not in page  # opens offline
    for key in METRIC_KEYS:
        assert f"<span class='key'>{key}</span>" in page  # one row per metric
    for heading in ("Job completion time", "Queue and utilisation", "Team shares"):
        assert f"<h2>{heading}</h2>" in page
    assert "<th>fifo</th>" in page and "<th>reverse</th>" in page  # one column per policy
