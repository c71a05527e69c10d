"""A study on a real ``LocalCluster`` of worker processes: it completes, each worker holds the tuning
window only, a worker killed mid-trial changes nothing, and the CLI writes every output and logs to MLflow.

The workload is small (400 synthetic jobs on 16 GPUs, 160 of them in the tuning window): what is
tested is the study's machinery, not the policy it finds.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace

import mlflow
import pandas as pd
import pytest
import yaml

from features.schema import validate
from features.synth import generate
from predictor.capacity.inventory import homogeneous_inventory
from predictor.cli import main
from predictor.sim.metrics import METRIC_KEYS
from predictor.sim.rules import load_policy
from predictor.tune.choice import part_key
from predictor.tune.dask_replays import dask_client
from predictor.tune.objectives import parse_objectives
from predictor.tune.report import render_html, report_document
from predictor.tune.study import TuneSettings, tune_policy

pytestmark = pytest.mark.slow

GPUS = 16
SETTINGS = TuneSettings(trials=8, population=4, seed=3, objectives=parse_objectives("avg_jct_s,max_wait_s,sla_misses,jain_index"))
VALIDATION = ["tuned", "ours", "qssf", "fifo", "kueue", "sjf-oracle"]


def _loaded_keys(client) -> dict[str, list[str]]:
    """The windows each worker holds (a lambda, so the worker needs no access to this test module)."""
    return client.run(lambda: sorted(__import__("predictor.tune.dask_replays", fromlist=["_LOADED"])._LOADED))


@pytest.fixture(scope="module")
def history() -> pd.DataFrame:
    return validate(generate(400, seed=11, cluster_gpus=GPUS, target_load=1.0)).jobs


@pytest.fixture(scope="module")
def client():
    with dask_client(workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def reference(history, client):
    held: list[dict[str, list[str]]] = []
    result = tune_policy(history, homogeneous_inventory(GPUS), client, SETTINGS,
                         on_generation=lambda _records: held.append(_loaded_keys(client)))
    return result, held


def _same_study(a, b) -> None:
    assert [(t.number, t.params, t.metrics) for t in a.search.trials] == [
        (t.number, t.params, t.metrics) for t in b.search.trials]
    assert a.search.front == b.search.front
    assert a.chosen.number == b.chosen.number and a.validation == b.validation


def test_a_small_study_completes_on_worker_processes(reference, client):
    result, held = reference
    assert len(result.search.trials) == 8 and all(t.ok for t in result.search.trials)
    assert result.workers == 2
    pids = client.run(os.getpid)
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()  # processes, not threads
    # during the search every worker holds the tuning window, and only it: no trial can see the validation window
    assert len(held) == 2
    for per_worker in held:
        assert len(per_worker) == 2 and all(len(keys) == 1 and keys[0].startswith("tune-") for keys in per_worker.values())
    assert _loaded_keys(client) == {w: [] for w in pids}  # and nothing is left behind
    # trial 0 is the base policy (its settings all lie inside the space)
    assert result.search.trials[0].metrics == result.tuning_baselines["ours"]
    front = result.search.front_trials()
    assert front and (result.chosen in front if not result.choice.baseline else result.chosen.number == -1)
    doc = report_document(result)
    assert list(doc) == ["chosen", "rule", "validation", "front"]
    assert list(doc["validation"]) == VALIDATION
    assert all(list(m) == list(METRIC_KEYS) for m in doc["validation"].values())
    assert all(set(p) == {"params", "tune"} and list(p["tune"]) == list(METRIC_KEYS) for p in doc["front"])
    assert doc["chosen"] == result.chosen.params and "qssf" in doc["rule"]
    # the tuning window's replays carry the rule's metrics on both halves of it (the rule reads them);
    # the validation window's do not
    assert all(part_key(2, "max_wait_s") in t.metrics for t in result.search.trials)
    assert part_key(1, "avg_jct_s") in result.tuning_baselines["qssf"] and "each of its 2" in doc["rule"]
    assert not any(k.startswith("part") for m in result.validation.values() for k in m)


def test_a_worker_killed_mid_trial_costs_that_trial_a_rerun_and_changes_nothing(reference, client, history):
    ref, _ = reference
    box: dict = {}

    def study() -> None:
        try:
            box["result"] = tune_policy(history, homogeneous_inventory(GPUS), client, SETTINGS)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["error"] = exc

    runner = threading.Thread(target=study)
    runner.start()
    killed = None
    deadline = time.monotonic() + 240
    while killed is None and runner.is_alive() and time.monotonic() < deadline:
        executing = client.run(lambda dask_worker: [str(ts.key) for ts in dask_worker.state.executing])
        busy = [(w, keys[0]) for w, keys in sorted(executing.items()) if keys and "-trial-" in keys[0]]
        if busy and busy[0][1].endswith(("-trial-5", "-trial-6")):  # mid-study, second generation
            worker, key = busy[0]
            assigned = client.processing()[worker]
            os.kill(client.run(os.getpid, workers=[worker])[worker], signal.SIGKILL)
            killed = (worker, key, set(map(str, assigned)))
        time.sleep(0.02)
    runner.join(600)
    assert killed is not None, "no trial of the second generation was seen running"
    if "error" in box:
        raise box["error"]
    _same_study(box["result"], ref)
    # the scheduler handed the killed trial out again; nothing that had not been on the killed worker was rerun
    _, key, assigned = killed
    keys = [f"{key.rpartition('-trial-')[0]}-trial-{n}" for n in range(SETTINGS.trials)]
    handed_out = client.run_on_scheduler(
        lambda dask_scheduler: {k: sum(1 for e in dask_scheduler.story(k) if e[2] == "processing") for k in keys})
    assert all(n >= 1 for n in handed_out.values()), handed_out  # the scheduler's log covers the study
    reran = {k for k, n in handed_out.items() if n > 1}
    assert key in reran and reran <= assigned
    assert len(client.scheduler_info()["workers"]) == 2 or client.wait_for_workers(2, timeout=60) is None


def test_the_cli_writes_every_output_logs_to_mlflow_and_one_worker_finds_the_same_front(
        reference, history, tmp_path, monkeypatch, capsys):
    ref, _ = reference
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    history.to_parquet(tmp_path / "jobs.parquet")
    out = tmp_path / "tuned"
    code = main(["tune", "--jobs", "jobs.parquet", "--cluster", str(GPUS), "--trials", "8", "--population", "4",
                 "--seed", "3", "--workers", "1", "--out", str(out), "--experiment", "tune-test"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "split of 400 jobs by submit time" in captured.err and "validate  120 jobs" in captured.err
    assert "rule: largest margin over qssf" in captured.out
    doc = json.loads((out / "report.json").read_text())
    assert doc == json.loads(json.dumps(report_document(ref)))  # 1 worker here, 2 there: same study
    # policy.yaml is a complete policy file: the loaders, `policy validate` and `simulate` take it
    tuned = load_policy(str(out / "policy.yaml"))
    assert tuned == ref.policy and tuned.name == "tuned"
    assert main(["policy", "validate", str(out / "policy.yaml")]) == 0
    assert main(["simulate", "--jobs", "jobs.parquet", "--cluster", str(GPUS), "--policy", f"tuned={out / 'policy.yaml'}",
                 "--out", str(tmp_path / "sim"), "--no-progress"]) == 0
    conf = (out / "slurm-priority.conf").read_text()
    assert f"PriorityWeightAge={round(tuned.weights['age'] * 10_000)}" in conf
    kinds = [d["kind"] for d in yaml.safe_load_all((out / "kueue-manifests.yaml").read_text())]
    assert {"WorkloadPriorityClass", "ResourceFlavor", "ClusterQueue", "LocalQueue"} <= set(kinds)
    page = (out / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page and "Validation window" in page
    # MLflow: one parent run, a nested run per trial, the outputs as artifacts
    exp = mlflow.get_experiment_by_name("tune-test")
    runs = mlflow.search_runs([exp.experiment_id], output_format="list")
    parents = [r for r in runs if r.data.tags.get("predictor.kind") == "tune-study"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0]
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(int(r.data.tags["trial"]) for r in trials) == list(range(8))
    assert all("avg_jct_s" in r.data.metrics and "weights.age" in r.data.params for r in trials)
    assert parent.data.metrics["validation.tuned.avg_jct_s"] == pytest.approx(doc["validation"]["tuned"]["avg_jct_s"])
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(parent.info.run_id)}
    assert {"report.json", "report.html", "policy.yaml", "study.json", "slurm-priority.conf",
            "kueue-manifests.yaml"} <= artifacts


@pytest.mark.parametrize("args, named", [
    (["--objective", "avg_jct_s,mean_wait"], "unknown metric 'mean_wait'"),
    (["--cluster", "inventory.yaml"], "inventory.yaml"),
    (["--cluster", "missing.yaml"], "missing.yaml"),
    (["--parts", "-1"], "--parts must be 0 or more"),
    (["--min-margin", "1.5"], "--min-margin must be in [0, 1)"),
], ids=["bad-objective", "unreadable-inventory", "missing-inventory", "negative-parts", "min-margin-out-of-range"])
def test_a_bad_objective_or_inventory_fails_before_any_trial_with_one_line(args, named, history, tmp_path,
                                                                         monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    history.to_parquet(tmp_path / "jobs.parquet")
    (tmp_path / "inventory.yaml").write_bytes(b"nodes: [\x00 not yaml")
    base = ["tune", "--jobs", "jobs.parquet", "--cluster", str(GPUS), "--trials", "4", "--out", "out"]
    for i, a in enumerate(args[::2]):  # replace an option or add it
        if a in base:
            base[base.index(a) + 1] = args[2 * i + 1]
        else:
            base += [a, args[2 * i + 1]]
    code = main(base)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and named in err and err.startswith("error:")
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()  # nothing started


def test_when_no_point_beats_qssf_by_the_minimum_margin_the_chosen_policy_is_qssf_itself(reference, history, client):
    ref, _ = reference
    # on this small history the best front point ties QSSF (margin 0): the chosen policy is QSSF itself,
    # and it replays as QSSF does
    assert ref.choice.baseline and ref.chosen.number == -1 and ref.chosen_label == "qssf"
    assert ref.policy.ordering == "qssf" and ref.policy.name == "tuned"
    assert ref.chosen.metrics == ref.tuning_baselines["qssf"]
    assert ref.validation["tuned"] == ref.validation["qssf"]
    assert "under 1.0%, so the chosen policy is qssf itself" in ref.choice.rule
    page = render_html(ref)
    assert "Chosen policy (qssf)" in page and "the chosen policy is QSSF itself" in page
    # with --min-margin 0 the same search's best qualifying point is chosen instead
    result = tune_policy(history, homogeneous_inventory(GPUS), client, replace(SETTINGS, min_margin=0.0))
    assert [(t.number, t.params, t.metrics) for t in result.search.trials] == [
        (t.number, t.params, t.metrics) for t in ref.search.trials]  # the same search; only the choice differs
    assert not result.choice.baseline and result.chosen in result.search.front_trials()
    assert result.policy.ordering == "multifactor" and "chosen margin" in result.choice.rule
