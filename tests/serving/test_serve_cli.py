"""``predictor serve`` and ``predictor db``: real processes, real files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from predictor.cli import main
from serving.tokens_file import generate_admin_tokens_file
from tests.serving.live import free_port

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREDICTOR_") and k != "MLFLOW_TRACKING_URI"}
    env.update({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "PYTHONPATH": str(ROOT),
                "PREDICTOR_MODEL_POLL_S": "3600", **extra})
    return env


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_serve_generates_an_admin_token_prints_addresses_and_serves(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "predictor", "serve", "--bind", f"127.0.0.1:{port}"],
                                cwd=tmp_path, env=_env(tmp_path), stdout=out, stderr=subprocess.STDOUT)
    try:
        tokens_file = tmp_path / "predictor-tokens.yaml"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        token = yaml.safe_load(tokens_file.read_text())["tokens"][0]["token"]
        assert oct(tokens_file.stat().st_mode & 0o777) == "0o600"
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()["uri"] == "models:/job-predictor@champion"
        assert (tmp_path / "predictor.db").is_file()  # the embedded default store, in the working dir
    finally:
        proc.terminate()
        proc.wait(20)
    out = log.read_text()
    assert f"dashboard: http://127.0.0.1:{port}/dashboard/#token={token}" in out
    assert f"API:       http://127.0.0.1:{port}/v1" in out


def test_several_workers_need_postgresql(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREDICTOR_TOKENS", '[{"name": "a", "role": "admin", "token": "0123456789abcdef"}]')
    monkeypatch.setenv("PREDICTOR_WORKERS", "1")  # serve sets it from --workers; restored after the test
    assert main(["serve", "--workers", "2"]) == 2
    assert "several workers need PostgreSQL" in capsys.readouterr().err


def test_generated_token_files_are_private_and_valid(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    token = generate_admin_tokens_file(path)
    doc = yaml.safe_load(path.read_text())
    assert doc["tokens"] == [{"name": "local-admin", "role": "admin", "token": token}]
    assert len(token) >= 32 and path.stat().st_mode & 0o077 == 0
