"""Real uvicorn servers on loopback for integration tests (a subprocess each, a free port)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.serving.conftest import TOKENS

ROOT = Path(__file__).resolve().parents[2]
#: The app factory the live tests serve: the real one, with the test predictor as the fallback.
TEST_FACTORY = "tests.serving.live_app:create_test_app"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREDICTOR_") and k != "MLFLOW_TRACKING_URI"}
    env.update({
        "PREDICTOR_DATABASE_URL": database_url,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "PREDICTOR_TOKENS": json.dumps([t.model_dump(exclude_none=True) for t in TOKENS.values()]),
        "PREDICTOR_STREAM_POLL_S": "0.1",
        # bursts in these tests check other things; shedding has its own (test_load_shedding.py)
        "PREDICTOR_QUEUE_WAIT_MS": "60000", "PREDICTOR_MAX_QUEUE": "1000",
        "PYTHONPATH": str(ROOT),
        **extra,
    })
    return env


@contextmanager
def live_server(env: dict[str, str], log: Path, *, workers: int = 1, factory: str = TEST_FACTORY,
                timeout_s: float = 60.0, uds: Path | None = None) -> Iterator[str]:
    """Start uvicorn (``--workers`` processes) and yield its base URL once every worker is ready.

    With ``uds`` it listens on that Unix socket instead of a loopback port (the URL is then
    ``http://localhost``; reach it with ``httpx.HTTPTransport(uds=...)``).
    """
    where = ["--uds", str(uds)] if uds else ["--host", "127.0.0.1", "--port", str(port := free_port())]
    cmd = [sys.executable, "-m", "uvicorn", "--factory", factory, *where, "--workers", str(workers),
           "--log-level", "warning", "--no-access-log"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    base = "http://localhost" if uds else f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, proc, log, timeout_s, workers, uds)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(base: str, proc: subprocess.Popen, log: Path, timeout_s: float, workers: int,
                uds: Path | None) -> None:
    deadline = time.monotonic() + timeout_s
    ready = 0
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(uds)) if uds else None, timeout=2.0)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            r = client.get(f"{base}/readyz")
            ready = ready + 1 if r.status_code == 200 else 0
            if ready >= 2 * workers:  # several answers in a row: every worker is up
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"uvicorn at {base} not ready after {timeout_s}s:\n{log.read_text()[-3000:]}")
