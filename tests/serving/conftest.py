"""Serving fixtures: tokens for each role, settings on a tmp SQLite store, an in-process app."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():  # starlette suggests httpx2; the httpx-based client works the same
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from serving.app import create_app
from serving.service import build_service
from serving.settings import Settings, TokenSpec
from tests.serving.browser import browser  # noqa: F401 (a fixture for the Chromium tests)
from tests.serving.doubles import no_model_slot

TOKENS = {
    "admin": TokenSpec(name="ops", role="admin", token="admin-token-0123456789"),
    "scheduler": TokenSpec(name="slurm-webhook", role="scheduler", token="sched-token-0123456789"),
    "nlp": TokenSpec(name="alice", role="member", team="nlp", token="nlp-token-0123456789"),
    "vision": TokenSpec(name="bob", role="member", team="vision", token="vision-token-0123456789"),
}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who].token}"}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'state.db'}",
                    mlflow_tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                    tokens=list(TOKENS.values()), stream_poll_s=0.05, max_body_bytes=64 * 1024,
                    # bursts in these tests check other things; shedding has its own (test_load_shedding.py)
                    queue_wait_ms=60_000, max_queue=1000)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    service = build_service(settings, model=no_model_slot())
    with TestClient(create_app(service=service)) as c:
        c.service = service  # type: ignore[attr-defined]
        yield c
