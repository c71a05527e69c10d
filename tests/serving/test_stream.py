from __future__ import annotations

import asyncio

import pytest
from starlette.websockets import WebSocketDisconnect

from predictor.store import StreamEvent
from serving.auth import Principal
from serving.stream import StreamClient, encode_event
from tests.serving.conftest import TOKENS, TestClient, auth

pytestmark = pytest.mark.timeout(60)


def _submit(client: TestClient, job_id: str, who: str = "scheduler", **fields) -> None:
    r = client.post("/v1/jobs", json={"job_id": job_id, "num_gpus": 8, **fields}, headers=auth(who))
    assert r.status_code == 201, r.text


def _receive_until(ws, kind: str, job_id: str) -> list[dict]:
    out = []
    while True:
        msg = ws.receive_json()
        out.append(msg)
        if msg["kind"] == kind and msg.get("job_id") == job_id:
            return out


def test_the_stream_needs_a_token(client: TestClient) -> None:
    with pytest.raises(WebSocketDisconnect) as exc, client.websocket_connect("/v1/stream") as ws:
        ws.receive_json()
    assert exc.value.code == 1008


def test_live_changes_arrive_in_sequence(client: TestClient) -> None:
    with client.websocket_connect("/v1/stream", headers=auth("admin")) as ws:
        assert ws.receive_json() == {"kind": "stream.hello", "last_seq": 0, "since": None}
        _submit(client, "a", team="nlp")
        msgs = _receive_until(ws, "decision", "a")
    assert [m["kind"] for m in msgs] == ["job.created", "decision"]
    assert [m["seq"] for m in msgs] == [1, 2]
    assert msgs[0]["data"]["job"]["job_id"] == "a" and msgs[0]["team"] == "nlp"
    assert msgs[1]["data"]["decision"]["action"] == "start"


def test_browsers_authenticate_with_the_bearer_subprotocol(client: TestClient) -> None:
    proto = f"bearer.{TOKENS['nlp'].token}"
    with client.websocket_connect("/v1/stream", subprotocols=["bearer", proto]) as ws:
        assert ws.accepted_subprotocol == "bearer"
        assert ws.receive_json()["kind"] == "stream.hello"


def test_a_client_resuming_with_since_misses_nothing(client: TestClient) -> None:
    for i in range(3):
        _submit(client, f"j{i}", team="nlp")
    with client.websocket_connect("/v1/stream?since=2", headers=auth("admin")) as ws:
        hello = ws.receive_json()
        # the three creations are stored before each POST answers; the re-plan's decision events may
        # still be on their way (a loaded machine), and whatever is stored by now is replayed below
        assert hello["since"] == 2 and hello["last_seq"] >= 3
        _submit(client, "live", team="nlp")
        msgs = _receive_until(ws, "job.created", "live")
    seqs = [m["seq"] for m in msgs]
    assert seqs == list(range(3, seqs[-1] + 1))  # replayed from the store, then live: no gap, no repeat
    assert msgs[-1]["seq"] > hello["last_seq"]


def test_members_receive_only_their_teams_events(client: TestClient) -> None:
    with client.websocket_connect("/v1/stream?since=0", headers=auth("nlp")) as ws:
        ws.receive_json()
        _submit(client, "v1", team="vision")
        _submit(client, "n1", team="nlp")
        msgs = _receive_until(ws, "job.created", "n1")
    assert {m["team"] for m in msgs} == {"nlp"}


def _event(seq: int, team: str | None = None) -> StreamEvent:
    return StreamEvent(seq, 0.0, "job.created", f"j{seq}", team, {})


def test_a_full_client_buffer_marks_the_client_without_waiting() -> None:
    async def run() -> None:
        slow = StreamClient(Principal("slow", "admin"), buffer=3)
        fast = StreamClient(Principal("fast", "admin"), buffer=100)
        for seq in range(1, 11):
            event = _event(seq)
            for c in (slow, fast):
                c.offer(event, encode_event(event))
        assert slow.overflowed.is_set() and slow.queue.qsize() == 3
        assert not fast.overflowed.is_set() and fast.queue.qsize() == 10

    asyncio.run(run())


def test_team_filter_in_the_client_buffer() -> None:
    async def run() -> None:
        member = StreamClient(Principal("alice", "member", "nlp"), buffer=10)
        for event in (_event(1, "nlp"), _event(2, "vision"), _event(3, None)):
            member.offer(event, encode_event(event))
        assert [member.queue.get_nowait()[0] for _ in range(member.queue.qsize())] == [1, 3]

    asyncio.run(run())


def test_an_idle_follower_reads_the_log_only_after_a_commit(tmp_path) -> None:  # noqa: ANN001
    """On SQLite the follower asks the store's data version every poll and reads the event log only
    when another connection committed (another worker's write), not four times a second."""
    from predictor.store import Database, NewEvent, append_events
    from serving.stream import StreamHub

    db = Database(f"sqlite:///{tmp_path / 'state.db'}")
    db.upgrade()
    seen: list[list[int]] = []

    async def scenario() -> tuple[int, int]:
        hub = StreamHub(db, poll_s=0.02, buffer=100, on_events=lambda evs: seen.append([e.seq for e in evs]))
        reads = 0
        fetch = hub._fetch

        def counted(since: int):  # noqa: ANN202
            nonlocal reads
            reads += 1
            return fetch(since)

        hub._fetch = counted
        await hub.start()
        try:
            await asyncio.sleep(0.5)  # ~25 polls, nothing committed
            idle_reads = reads
            other = Database(db.url)  # another worker's connection
            with other.writing() as s:
                append_events(s, [NewEvent("job.created", {}, "j1", "nlp")], 1.0)
            other.dispose()
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.02)
            return idle_reads, hub.last_seq
        finally:
            await hub.stop()

    idle_reads, last = asyncio.run(scenario())
    assert idle_reads <= 1  # the first poll reads once; then nothing until a commit
    assert seen == [[1]] and last == 1  # the other worker's event arrived within a few polls
    db.dispose()
