"""Hot reload with a real MLflow registry: the service loads ``champion``, follows the alias when it
moves, and no request fails or mixes two models while it swaps (a real uvicorn, the real app factory)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from models import compiled
from tests.serving.conftest import auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _register(seed: int, tracking: str, workdir: Path) -> str:
    """Train a small bundle on synthetic jobs, log it and register it; returns its version."""
    import mlflow

    from features.synth.pipeline import generate
    from models.fit import fit_bundle
    from models.lgbm import BoosterParams
    from models.memory import MemoryEstimator
    from models.registry import ensure_experiment, log_bundle, plain_frame, register_version

    small = BoosterParams(n_estimators=15, num_leaves=7, min_child_samples=5, num_threads=1)
    jobs = generate(300, seed=seed)
    bundle = fit_bundle(jobs, duration_params=small, memory_estimator=MemoryEstimator(params=small),
                        refit_on_calibration=False)
    mlflow.set_tracking_uri(tracking)
    mlflow.set_experiment(experiment_id=ensure_experiment("hot-reload-test"))
    with mlflow.start_run():
        info = log_bundle(bundle, jobs.iloc[:3])
        held = workdir / "heldout.parquet"  # what the promotion gate compares versions on
        plain_frame(jobs.iloc[-60:]).to_parquet(held, index=False)
        mlflow.log_artifact(str(held), artifact_path="heldout")
    return register_version(info.model_uri, {"seed": str(seed)})


def _champion(version: str, tracking: str) -> None:
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=tracking).set_registered_model_alias("job-predictor", "champion", version)


def _wait_for_version(api: httpx.Client, version: str, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = api.get("/v1/models").json()
        if status["version"] == version:
            return status
        time.sleep(0.2)
    raise AssertionError(f"model {version} not loaded; last status {status}")


def _wait_compiled(api: httpx.Client, timeout_s: float = 300) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = api.get("/v1/models").json()
        if status["boosters"] is not None and not status["compiling"]:
            return status
        time.sleep(0.2)
    raise AssertionError(f"boosters not compiled; last status {status}")


def test_the_champion_alias_is_followed_without_failing_a_request(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # MLflow artifacts go to ./mlartifacts
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = _register(1, tracking, tmp_path)
    _champion(first, tracking)
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_MODEL_POLL_S="0.5")
    env["MLFLOW_TRACKING_URI"] = tracking
    with live_server(env, tmp_path / "uvicorn.log", factory="serving.app:create_app", timeout_s=180) as base, \
            httpx.Client(base_url=base, headers=auth("scheduler"), timeout=30) as api:
        status = _wait_for_version(api, f"job-predictor/{first}")
        assert not status["fallback"] and status["loaded_at"] is not None
        ready = api.get("/readyz").json()
        assert ready["status"] == "ready" and ready["problems"] == []  # ready while its boosters compile
        if compiled.compilation_enabled() and compiled.compiler_available():
            status = _wait_compiled(api)
            assert status["boosters"] > 0 and status["boosters_compiled"] == status["boosters"]

        answers: list[tuple[int, str, str, bool]] = []
        headers: list[bool] = []
        stop = threading.Event()

        def hammer() -> None:
            job = {"job_id": "probe", "num_gpus": 8, "team": "nlp", "time_limit_s": 7200, "model_params": 7e9,
                   "precision": "bf16", "job_name": "train-llama"}
            with httpx.Client(base_url=base, headers=auth("scheduler"), timeout=30) as c:
                while not stop.is_set():
                    r = c.post("/v1/score", json=job)
                    body = r.json() if r.status_code == 200 else {}
                    pred = body.get("results", [{}])[0].get("prediction", {})
                    version = body.get("model", {}).get("version", "")
                    answers.append((r.status_code, version, pred.get("model_version", ""),
                                    bool(pred.get("fallback", True))))
                    headers.append(r.headers.get("x-model-version") == version)

        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        second = _register(2, tracking, tmp_path)  # registered as challenger
        assert api.post("/v1/models/promote", json={}).status_code == 403  # admins promote
        gated = api.post("/v1/models/promote", json={}, headers=auth("admin"))
        assert gated.status_code == 200 and gated.json()["reason"], gated.text  # compared on held-out jobs
        assert {"candidate_metrics", "champion_metrics"} <= set(gated.json()["details"])
        if not gated.json()["promoted"]:  # worse on some metric: an admin may still force it, saying why
            forced = api.post("/v1/models/promote", json={"force": True, "reason": "hot-reload test"},
                              headers=auth("admin"))
            assert forced.status_code == 200 and forced.json()["promoted"], forced.text
        _wait_for_version(api, f"job-predictor/{second}")
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(30)
        metrics = api.get("/metrics").text

    assert answers and {code for code, *_ in answers} == {200}  # not one request failed
    assert all(version == pred_version for _, version, pred_version, _ in answers)  # never two models at once
    assert not any(fallback for *_, fallback in answers) and all(headers)  # the header names the same model
    seen = [version for _, version, _, _ in answers]
    assert seen[0] == f"job-predictor/{first}" and seen[-1] == f"job-predictor/{second}"
    swap = seen.index(f"job-predictor/{second}")
    assert set(seen[swap:]) == {f"job-predictor/{second}"}  # once swapped, only the new model answers
    assert f'predictor_model_info{{fallback="false",version="job-predictor/{second}"}} 1.0' in metrics
