"""``predictor explain`` and ``predictor teams`` against a state store filled through the tracked queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.fixed import NULL_VERSION, NullPredictor
from predictor.cli import main
from predictor.engine.model_slot import ModelSlot
from predictor.engine.wiring import build_engine, get_engine_settings
from predictor.queue.tracked_queue import TrackedQueue
from predictor.store import Database
from predictor.store.audit import Actor

SCHED = Actor("webhook", "scheduler")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", url)
    get_engine_settings.cache_clear()
    db = Database(url)
    db.upgrade()
    slot = ModelSlot.fixed(NullPredictor(), NULL_VERSION, fallback_reason="test")
    engine, policy = build_engine(get_engine_settings(), model=slot)
    queue = TrackedQueue(db, engine)
    queue.load(policy)
    for i in range(4):  # the default 64-GPU cluster, full
        queue.submit({"job_id": f"run-{i}", "num_gpus": 16, "team": "vision", "time_limit_s": 14_400}, SCHED)
        queue.record_event(f"run-{i}", {"kind": "started"}, SCHED)
    queue.submit({"job_id": "waits", "num_gpus": 16, "team": "nlp", "time_limit_s": 3600}, SCHED)
    db.dispose()
    yield url
    get_engine_settings.cache_clear()


def test_explain_prints_the_chain_and_json(store: str, capsys) -> None:
    assert main(["explain", "waits"]) == 0
    out = capsys.readouterr().out
    assert "waits: why it is not running" in out and "Rank 1 of 1" in out
    assert "holds its GPUs: run-" in out and "start estimate: p10" in out
    assert main(["explain", "waits", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["chain"]["held_by"]["running_jobs_on_these_types"] == 4
    assert doc["chain"]["start_estimate"]["p50_ts"] > doc["as_of"]


def test_explain_of_a_job_that_is_not_pending_exits_2(store: str, capsys) -> None:
    assert main(["explain", "run-0"]) == 2
    assert "no pending job 'run-0'" in capsys.readouterr().err


def test_teams_lists_factor_and_recovery(store: str, capsys) -> None:
    assert main(["teams"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert set(lines) == {"nlp", "vision"}
    assert "never at current rates" in lines["vision"] and lines["nlp"].rstrip().endswith("now")
    assert main(["teams", "vision", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["team"] == "vision" and doc["running_gpus"] == 64 and doc["over_share"]
    assert main(["teams", "nobody"]) == 2


def test_explain_and_teams_without_a_store_exit_2_and_create_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    missing = tmp_path / "nowhere" / "state.db"
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{missing}")
    get_engine_settings.cache_clear()
    try:
        for argv in (["explain", "waits"], ["teams"]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert f"no state store at {missing}" in err and "Traceback" not in err
        assert not missing.exists() and not missing.parent.exists()
    finally:
        get_engine_settings.cache_clear()


def test_a_store_without_tables_or_at_another_revision_is_named(tmp_path: Path, monkeypatch, capsys) -> None:
    import sqlite3

    path = tmp_path / "state.db"
    sqlite3.connect(path).close()  # a file, no tables
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{path}")
    get_engine_settings.cache_clear()
    try:
        assert main(["teams"]) == 2
        assert "has no tables yet (`predictor db upgrade` creates them" in capsys.readouterr().err
        Database(f"sqlite:///{path}").upgrade()
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE alembic_version SET version_num = '0000_older'")
        assert main(["explain", "waits"]) == 2
        err = capsys.readouterr().err
        assert "is at schema revision 0000_older, this package's is" in err and len(err.strip().splitlines()) == 1
    finally:
        get_engine_settings.cache_clear()


def test_an_unreachable_store_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    get_engine_settings.cache_clear()
    try:
        assert main(["teams"]) == 1  # unreachable: the environment, not the input
        err = capsys.readouterr().err
        assert "cannot read the state store" in err and len(err.strip().splitlines()) == 1
    finally:
        get_engine_settings.cache_clear()
