"""The retraining CronJob's command, taken from the rendered manifest, runs as written: ingest the
bundled Slurm sample from the history volume, train, register and promote in a local MLflow store.

Only what the cluster provides is replaced: the two volume mounts become temporary folders and the
MLflow server a SQLite store; the environment is the container's own plus its ConfigMap's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.manifests import KUSTOMIZE, ROOT, render

BUNDLED_SACCT = ROOT / "data" / "samples" / "eagle" / "sample_eagle_data.csv"


def _container_env(objs: list[dict], container: dict) -> dict[str, str]:
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        name = src["configMapRef"]["name"]
        env.update(next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name)["data"])
    for e in container.get("env") or []:
        assert "value" in e, f"{e['name']}: retraining needs no Secret"
        env[e["name"]] = e["value"]
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(argv, env={**env, "PATH": path}, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cronjob_command_runs_as_written(kubectl, tmp_path: Path):
    objs = render(KUSTOMIZE / "overlays" / "small")
    job = next(o for o in objs if o["kind"] == "CronJob" and o["metadata"]["name"] == "predictor-retrain")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = _container_env(objs, container)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    # the cluster's parts, here: each mounted volume is a temporary folder, MLflow a SQLite store
    local = {mount: tmp_path / name for name, mount in mounts.items()}
    for folder in local.values():
        folder.mkdir()
    env = {k: next((str(local[m]) + v[len(m):] for m in local if v == m or v.startswith(m + "/")), v)
           for k, v in env.items()}
    store = tmp_path / "mlflow.db"
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{store}"
    history = local[mounts["history"]]
    (history / "exports").mkdir()
    shutil.copy(BUNDLED_SACCT, history / "exports" / BUNDLED_SACCT.name)
    argv = container["command"] + container["args"]
    assert argv[0] == "/bin/sh"

    first = _run(argv, env, tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    work = Path(env["PREDICTOR_WORK_DIR"])
    summary = json.loads((work / "ingest.json").read_text())
    assert summary["rows_kept"] > 900 and summary["format"] == "sacct"
    promoted = json.loads((work / "promote.json").read_text())
    assert promoted["promoted"] is True and promoted["version"] == "1" and promoted["reason"] == "no champion yet"

    # the next night: a second version is trained and goes through the gate against the champion;
    # promoted or refused, the job succeeds and the champion is one of the two versions
    second = _run(argv, env, tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    gate = json.loads((work / "promote.json").read_text())
    assert gate["version"] == "2" and gate["previous"] == "1" and "candidate_metrics" in gate
    if not gate["promoted"]:
        assert "challenger not promoted" in second.stdout

    from mlflow import MlflowClient

    champion = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"]).get_model_version_by_alias(
        "job-predictor", "champion")
    assert str(champion.version) == ("2" if gate["promoted"] else "1")


@pytest.mark.timeout(120)
def test_cronjob_command_fails_when_ingest_fails(kubectl, tmp_path: Path):
    """An empty history volume is an error of the job, not a silently skipped night."""
    objs = render(KUSTOMIZE / "overlays" / "small")
    job = next(o for o in objs if o["kind"] == "CronJob")
    container = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    env = _container_env(objs, container)
    (tmp_path / "history" / "exports").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    env.update(PREDICTOR_HISTORY_DIR=str(tmp_path / "history"), PREDICTOR_WORK_DIR=str(tmp_path / "work"),
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    done = _run(container["command"] + container["args"], env, tmp_path)
    assert done.returncode != 0
    assert not (tmp_path / "mlflow.db").exists()
