"""Keep-alive connections are recycled after ``KEEPALIVE_REQUESTS`` requests (``Connection: close``), so
clients reconnect and reach whichever worker is waiting; checked on the middleware and on real uvicorn."""

from __future__ import annotations

import socket
from pathlib import Path

from serving.middleware import KEEPALIVE_REQUESTS, ObservabilityMiddleware
from tests.serving.conftest import TestClient
from tests.serving.live import live_server, server_env


def scope(client: tuple[str, int] | None, version: str = "1.1") -> dict:
    return {"type": "http", "http_version": version, "client": client, "server": ("127.0.0.1", 8000)}


def test_the_nth_request_on_a_connection_closes_it() -> None:
    mw = ObservabilityMiddleware(app=None, keepalive_requests=3)  # type: ignore[arg-type]
    a, b = ("10.0.0.1", 5000), ("10.0.0.1", 5001)
    assert [mw._last_on_connection(scope(a)) for _ in range(3)] == [False, False, True]
    assert [mw._last_on_connection(scope(b)) for _ in range(2)] == [False, False]  # counted per connection
    assert [mw._last_on_connection(scope(a)) for _ in range(3)] == [False, False, True]  # a new connection
    assert not any(mw._last_on_connection(scope(a, "1.0")) for _ in range(5))  # HTTP/1.0 closes anyway
    assert not any(mw._last_on_connection(scope(None)) for _ in range(5))  # no address: nothing to count


def test_the_app_sends_connection_close_on_the_nth_response(client: TestClient) -> None:
    closes = [client.get("/healthz").headers.get("connection") for _ in range(2 * KEEPALIVE_REQUESTS)]
    assert closes.count("close") == 2
    assert closes[KEEPALIVE_REQUESTS - 1] == closes[-1] == "close"


def _request(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return head.lower()


def test_uvicorn_closes_the_connection_and_a_new_one_works(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    with live_server(env, tmp_path / "uvicorn.log") as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            heads = [_request(sock) for _ in range(KEEPALIVE_REQUESTS)]
            assert b"connection: close" in heads[-1]
            assert not any(b"connection: close" in h for h in heads[:-1])
            assert sock.recv(1) == b""  # the server closed its end
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            assert _request(sock).startswith(b"http/1.1 200")
