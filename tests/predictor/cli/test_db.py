"""``predictor db``: migrations of the state store from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictor.cli import main
from predictor.engine.wiring import get_engine_settings as get_settings


def test_db_upgrade_and_current(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")

    get_settings.cache_clear()
    try:
        assert main(["db", "current"]) == 0
        assert "at empty, newest 0001" in capsys.readouterr().out
        assert main(["db", "upgrade"]) == 0
        assert "empty -> 0001" in capsys.readouterr().out
        assert main(["db", "current"]) == 0
        assert "at 0001, newest 0001" in capsys.readouterr().out
    finally:
        get_settings.cache_clear()


def test_db_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    get_settings.cache_clear()
    try:
        assert main(["db", "upgrade", "no-such-revision"]) == 2
        err = capsys.readouterr().err
        assert "no-such-revision" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        monkeypatch.setenv("PREDICTOR_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
        get_settings.cache_clear()
        for argv in (["db", "current"], ["db", "upgrade"]):
            assert main(argv) == 1  # unreachable: the environment, not the input
            err = capsys.readouterr().err
            assert "cannot reach the state store" in err and len(err.strip().splitlines()) == 1
    finally:
        get_settings.cache_clear()
