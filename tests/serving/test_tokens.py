"""API tokens survive restarts and rotate only when asked (issue 12, item 11).

``predictor serve`` with no token configured writes ``predictor-tokens.yaml`` once and reuses it after;
``predictor tokens rotate`` replaces tokens in the file, and a running server refuses the old ones at
once (it re-reads the file when it changes).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from predictor.cli import main
from serving.tokens_file import generate_admin_tokens_file
from tests.serving.live import ROOT, free_port, live_server, server_env

MEMBER = {"name": "alice", "role": "member", "team": "nlp", "token": "alice-token-0123456789"}


def _write(path: Path, *entries: dict) -> None:
    path.write_text(yaml.safe_dump({"tokens": list(entries)}))


def _models(base: str, token: str) -> int:
    return httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code


def _serve_once(tmp_path: Path, env: dict) -> tuple[str, str]:
    """Run ``predictor serve`` in ``tmp_path`` until it answers; returns (admin token that works, output)."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "predictor", "serve", "--bind", f"127.0.0.1:{port}"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        token = yaml.safe_load((tmp_path / "predictor-tokens.yaml").read_text())["tokens"][0]["token"]
        assert _models(f"http://127.0.0.1:{port}", token) == 200
    finally:
        proc.terminate()
        proc.wait(20)
    return token, log.read_text()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_serve_keeps_an_existing_tokens_file(tmp_path: Path) -> None:
    env = {k: v for k, v in server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path).items()
           if k != "PREDICTOR_TOKENS"} | {"PREDICTOR_MODEL_POLL_S": "3600"}
    first, out1 = _serve_once(tmp_path, env)
    assert "wrote an admin token" in out1
    written = (tmp_path / "predictor-tokens.yaml").read_bytes()
    second, out2 = _serve_once(tmp_path, env)
    assert second == first and (tmp_path / "predictor-tokens.yaml").read_bytes() == written
    assert "wrote" not in out2 and f"using the API tokens in {tmp_path / 'predictor-tokens.yaml'}" in out2
    assert f"#token={first}" in out2  # the dashboard link still carries the (same) token


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_running_server_refuses_a_rotated_token(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tokens.yaml"
    old = generate_admin_tokens_file(path)
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_TOKENS="[]",
                     PREDICTOR_TOKENS_FILE=str(path))
    with live_server(env, tmp_path / "uvicorn.log") as base:
        assert _models(base, old) == 200
        assert main(["tokens", "rotate", "--file", str(path)]) == 0
        new = yaml.safe_load(path.read_text())["tokens"][0]["token"]
        assert new != old and new in capsys.readouterr().out
        assert _models(base, old) == 401
        assert _models(base, new) == 200
        assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_rotate_keeps_digest_entries_as_digests_and_the_others_as_they_were(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tokens.yaml"
    admin = {"name": "ops", "role": "admin", "sha256": hashlib.sha256(b"ops-token-0123456789").hexdigest()}
    _write(path, admin, MEMBER)
    assert main(["tokens", "rotate", "--file", str(path), "--name", "ops"]) == 0
    printed = capsys.readouterr().out
    doc = yaml.safe_load(path.read_text())["tokens"]
    new = printed.split("ops: ", 1)[1].split()[0]
    assert doc[0] == {**admin, "sha256": hashlib.sha256(new.encode()).hexdigest()}  # the secret is not stored
    assert doc[1] == MEMBER


@pytest.mark.parametrize(("args", "words"), [
    pytest.param(["--name", "nobody"], "no token named 'nobody'", id="unknown-name"),
    pytest.param([], "--name or --all", id="several-need-a-choice"),
])
def test_rotate_errors_are_one_line_exit_2(tmp_path: Path, capsys, args: list, words: str) -> None:
    path = tmp_path / "tokens.yaml"
    _write(path, MEMBER, {**MEMBER, "name": "bob", "token": "bob-token-0123456789"})
    before = path.read_bytes()
    assert main(["tokens", "rotate", "--file", str(path), *args]) == 2
    assert words in capsys.readouterr().err
    assert path.read_bytes() == before


def test_rotate_all(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tokens.yaml"
    _write(path, MEMBER, {**MEMBER, "name": "bob", "token": "bob-token-0123456789"})
    assert main(["tokens", "rotate", "--file", str(path), "--all"]) == 0
    tokens = [t["token"] for t in yaml.safe_load(path.read_text())["tokens"]]
    assert MEMBER["token"] not in tokens and "bob-token-0123456789" not in tokens and len(set(tokens)) == 2


def test_rotate_without_a_file_says_where_it_looked(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PREDICTOR_TOKENS_FILE", raising=False)
    assert main(["tokens", "rotate"]) == 2
    assert str(tmp_path / "predictor-tokens.yaml") in capsys.readouterr().err


def test_the_tokens_command_is_registered_through_the_entry_point() -> None:
    from importlib.metadata import entry_points

    assert {ep.name: ep.value for ep in entry_points(group="predictor.commands")}.get("tokens") == "serving.tokens_cli"
    assert ROOT.joinpath("serving", "tokens_cli.py").exists()


def test_a_tokens_file_that_stops_reading_fails_closed(tmp_path: Path) -> None:
    """Its tokens are refused until it reads again; the inline ones keep working."""
    from serving.auth import TokenRegistry
    from serving.settings import Settings, TokenSpec

    path = tmp_path / "tokens.yaml"
    _write(path, MEMBER)
    inline = TokenSpec(name="ci", role="admin", token="ci-token-0123456789")
    registry = TokenRegistry.from_settings(Settings(database_url="sqlite://", tokens_file=path, tokens=[inline]))
    assert registry.authenticate(MEMBER["token"]).name == "alice"
    path.write_text("tokens: [oops")
    assert registry.authenticate(MEMBER["token"]) is None
    assert registry.authenticate("ci-token-0123456789").name == "ci"
    _write(path, {**MEMBER, "token": "alice-token-9876543210"})
    assert registry.authenticate(MEMBER["token"]) is None
    assert registry.authenticate("alice-token-9876543210").name == "alice"
