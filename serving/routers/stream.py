"""WebSocket ``/v1/stream``: queue, decision and reservation changes, numbered, resumable."""

from __future__ import annotations

import asyncio
import contextlib
import json

from fastapi import APIRouter, WebSocket, WebSocketDisconnect, status

from predictor.store import events_since
from serving.auth import WS_SUBPROTOCOL_PREFIX
from serving.service import Service
from serving.stream import CLOSE_TOO_SLOW, StreamClient, encode_event

#: How long a dropped slow client has to read what was already sent before the ``4429`` close frame
#: (its socket buffers are full: the frame waits behind them); then the connection is aborted.
SLOW_CLOSE_GRACE_S = 10.0

router = APIRouter()
_REPLAY_PAGE = 500


@router.websocket("/v1/stream")
async def stream(websocket: WebSocket, since: int | None = None, estimates: bool = False) -> None:
    """Send every change as ``{"seq", "ts", "kind", "job_id", "team", "data"}``; see ``serving.stream``.

    Authenticate with ``Authorization: Bearer <token>`` or the subprotocol ``bearer.<token>``. Members
    receive only their team's events (and those without a team). ``?estimates=true``: also the
    unnumbered ``start_estimates`` messages (all current estimates after the hello, then what moved).
    """
    service: Service = websocket.app.state.service
    subprotocols = websocket.headers.get("sec-websocket-protocol")
    principal = service.tokens.from_authorization(websocket.headers.get("authorization"))
    via_subprotocol = False
    if principal is None:
        principal = service.tokens.from_subprotocols(subprotocols)
        via_subprotocol = principal is not None
    if principal is None:
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="missing or unknown bearer token")
        return
    if since is not None and since < 0:
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="since must be >= 0")
        return
    await websocket.accept(subprotocol=WS_SUBPROTOCOL_PREFIX.rstrip(".") if via_subprotocol else None)
    hub = service.hub
    client, live_from = hub.register(principal, estimates=estimates)
    service.metrics.stream_clients.set(hub.client_count)
    sender = asyncio.create_task(_send_all(websocket, service, client, since, live_from))
    receiver = asyncio.create_task(_drain_incoming(websocket))
    overflow = asyncio.create_task(client.overflowed.wait())
    try:
        done, _ = await asyncio.wait({sender, receiver, overflow}, return_when=asyncio.FIRST_COMPLETED)
        if overflow in done:
            hub.dropped()
            service.metrics.stream_dropped.inc()
            sender.cancel()
            last = client.last_sent
            with contextlib.suppress(Exception):
                await asyncio.wait_for(websocket.close(
                    code=CLOSE_TOO_SLOW, reason=f"too slow; resume with since={last}"), timeout=SLOW_CLOSE_GRACE_S)
        elif sender in done and sender.exception() is not None and not isinstance(
                sender.exception(), WebSocketDisconnect | RuntimeError):
            raise sender.exception()  # type: ignore[misc]
    finally:
        for task in (sender, receiver, overflow):
            task.cancel()
        hub.unregister(client)
        service.metrics.stream_clients.set(hub.client_count)


async def _drain_incoming(websocket: WebSocket) -> None:
    """Read (and ignore) what the client sends, so a disconnect is noticed at once."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        while True:
            await websocket.receive_text()


async def _send_all(websocket: WebSocket, service: Service, client: StreamClient, since: int | None,
                    live_from: int) -> None:
    """Hello, then the replay from the store (``since < seq <= live_from``), then live events."""
    client.last_sent = since if since is not None else live_from
    await websocket.send_text(json.dumps({"kind": "stream.hello", "last_seq": live_from, "since": since}))
    if since is not None and since < live_from:
        team_only = client.principal.is_member
        cursor = since
        while cursor < live_from:
            page = await asyncio.to_thread(_page, service, cursor, client.principal.team, team_only)
            page = [e for e in page if e.seq <= live_from]
            if not page:
                break
            for event in page:
                await websocket.send_text(encode_event(event))
                client.last_sent = event.seq
            cursor = page[-1].seq
        client.last_sent = max(client.last_sent, live_from)
    first = await service.hub.first_estimates(client)  # all current start estimates (not numbered)
    if first is not None:
        await websocket.send_text(first)
    while True:
        seq, text = await client.queue.get()
        if seq is None:  # a start-estimate delta
            await websocket.send_text(text)
            continue
        if seq <= client.last_sent:
            continue
        await websocket.send_text(text)
        client.last_sent = seq


def _page(service: Service, cursor: int, team: str | None, team_only: bool):
    with service.db.session() as s:
        return events_since(s, cursor, limit=_REPLAY_PAGE, team=team, only_team=team_only)
