from __future__ import annotations

from pathlib import Path

import pytest

from features.errors import InputError
from serving.settings import Settings, get_settings, load_tokens, token_digest


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", "postgresql://postgres@db/predictor")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    monkeypatch.setenv("PREDICTOR_BIND", "0.0.0.0:9000")
    monkeypatch.setenv("PREDICTOR_WORKERS", "4")
    monkeypatch.setenv("PREDICTOR_OUTBOX_TARGETS", '["slurm"]')
    s = Settings()
    assert (s.database_url, s.mlflow_tracking_uri) == ("postgresql://postgres@db/predictor", "http://mlflow:5000")
    assert (s.host, s.port, s.workers, s.outbox_targets) == ("0.0.0.0", 9000, 4, ["slurm"])


def test_defaults_are_embedded_files_in_the_working_directory(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("PREDICTOR_DATABASE_URL", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    s = Settings()
    assert s.database_url == f"sqlite:///{tmp_path.resolve()}/predictor.db"
    assert s.mlflow_tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert s.model_uri == "models:/job-predictor@champion" and s.bind == "127.0.0.1:8000"


@pytest.mark.parametrize(("var", "value", "message"), [
    ("PREDICTOR_WORKERS", "0", "PREDICTOR_WORKERS: Input should be greater than or equal to 1"),
    ("PREDICTOR_BIND", "localhost", "PREDICTOR_BIND: String should match pattern"),
    ("PREDICTOR_BIND", "127.0.0.1:99999", "PREDICTOR_BIND: Value error, port 99999 is not a TCP port"),
    ("PREDICTOR_BIND", "127.0.0.1:0", "PREDICTOR_BIND: Value error, port 0 is not a TCP port"),
    ("PREDICTOR_TOKENS", "not json", "PREDICTOR_TOKENS"),
])
def test_bad_environment_values_name_the_variable(monkeypatch: pytest.MonkeyPatch, var, value, message) -> None:
    monkeypatch.setenv(var, value)
    get_settings.cache_clear()
    try:
        with pytest.raises(InputError, match=message):
            get_settings()
    finally:
        get_settings.cache_clear()


def test_get_settings_is_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    get_settings.cache_clear()
    try:
        assert get_settings() is get_settings()
    finally:
        get_settings.cache_clear()


def _tokens_file(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    return Settings(tokens_file=path)


def test_token_file_with_secrets_and_digests(tmp_path: Path) -> None:
    secret = "s3cret-token-for-alice-000"
    s = _tokens_file(tmp_path, f"""
tokens:
  - {{name: sched, role: scheduler, token: "scheduler-token-0000"}}
  - {{name: alice, role: member, team: nlp, sha256: "{token_digest(secret)}"}}
""")
    specs = load_tokens(s)
    assert [(t.name, t.role, t.team) for t in specs] == [("sched", "scheduler", None), ("alice", "member", "nlp")]
    assert specs[1].digest == token_digest(secret)


@pytest.mark.parametrize(("text", "message"), [
    ("tokens:\n  - {name: a, role: member, token: 'long-enough-token-1'}", "tokens.0: Value error, a member token needs a 'team'"),
    ("tokens:\n  - {name: a, role: root, token: 'long-enough-token-1'}", "tokens.0.role"),
    ("tokens:\n  - {name: a, role: admin, token: short}", "tokens.0.token"),
    ("tokens:\n  - {name: a, role: admin}", "exactly one of 'token' and 'sha256'"),
    ("tokens:\n  - {name: a, role: admin, token: 'long-enough-token-1', extra: 1}", "tokens.0.extra"),
    ("tokens: [\n", r"tokens file .*: line 2, column 1: not valid YAML \(expected the node content"),
    ("tokens:\n  - {name: a, role: admin, token: 'long-enough-token-1'}\n"
     "  - {name: a, role: admin, token: 'long-enough-token-2'}", "name 'a' is used twice"),
])
def test_bad_token_files_are_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_tokens(_tokens_file(tmp_path, text))


def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="PREDICTOR_TOKENS_FILE: .*nope.yaml does not exist"):
        load_tokens(Settings(tokens_file=tmp_path / "nope.yaml"))
