"""Shared test fixtures: where the public reference data lives, and how absent services skip.

A test that needs something absent (the shared data folder, PostgreSQL, a Slurm install, Chromium)
skips with a message naming what is missing. With ``PREDICTOR_REQUIRE_ALL=1`` (set by ``.ci/run``)
the same condition fails the test instead, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests explore new examples on every local run; CI (HYPOTHESIS_PROFILE=ci, set by .ci/run)
# replays a fixed set, so a landing never depends on the luck of the draw and a failure reproduces.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PREDICTOR_SHARED_DATA", ROOT.parent / "shared" / "data"))
BUNDLED_DATA = ROOT / "data"


def require(condition: bool, what: str) -> None:
    """Skip (locally) or fail (in CI) when ``condition`` is false; ``what`` names what is missing."""
    if condition:
        return
    if os.environ.get("PREDICTOR_REQUIRE_ALL") == "1":
        pytest.fail(f"required for CI but missing: {what}")
    pytest.skip(f"missing: {what}")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    require(SHARED_DATA.is_dir(), f"public reference data folder {SHARED_DATA} (see ../shared/data/README.md)")
    return SHARED_DATA


@pytest.fixture
def shared_file(shared_data: Path):
    """Return a function that gives a path under ../shared/data or skips/fails naming it."""

    def get(rel: str) -> Path:
        p = shared_data / rel
        require(p.exists(), f"shared data file {p}")
        return p

    return get


#: PostgreSQL server the integration tests use (trust auth); override with PREDICTOR_TEST_POSTGRES.
POSTGRES_ADMIN_URL = os.environ.get("PREDICTOR_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def postgres_url():
    """A fresh, empty PostgreSQL database for this test session, dropped at its end (SQLAlchemy URL)."""
    import secrets

    import psycopg

    try:
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        require(False, f"PostgreSQL server at {POSTGRES_ADMIN_URL} ({str(exc).strip().splitlines()[0]})")
        return
    name = f"predictor_test_{os.getpid()}_{secrets.token_hex(3)}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + "/" + name
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def _settings_read_per_test():
    """The process's settings are read from the environment once (``lru_cache``, as a served
    process wants); a test that sets ``PREDICTOR_*`` variables must not get the previous test's
    (``predictor sync`` once decided against an earlier test's state store when run after it)."""
    from predictor.engine.wiring import get_engine_settings
    from serving.settings import get_settings

    get_engine_settings.cache_clear()
    get_settings.cache_clear()
    yield
    get_engine_settings.cache_clear()
    get_settings.cache_clear()
