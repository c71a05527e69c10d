"""The live stream's hub: follows the store's event log and fans events out to WebSocket clients.

Protocol (``/v1/stream``, see docs/serving.md, The stream):

1. The server sends ``{"kind": "stream.hello", "last_seq": L, "since": S}``.
2. With ``?since=S`` it replays every stored event with ``S < seq <= L`` from the store, then goes
   on live; without it, it goes live from ``L``. Every event carries its ``seq``; a client keeps the
   last one it saw and reconnects with ``?since=<that>`` to miss nothing.
3. A client that falls more than ``buffer`` events behind is closed with code ``4429`` and a reason
   naming the last ``seq`` it was sent; it reconnects with ``since``. One slow client therefore never
   holds up the server or the other clients: the hub only ever does ``put_nowait``.

Every worker runs one hub. Its follower reads the event log by ``seq`` (woken at once by this worker's
own writes, by PostgreSQL ``NOTIFY`` from other workers, or else every ``poll_s`` seconds), so an event
written by any worker reaches every client of every worker, in ``seq`` order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

from predictor.store import Database, StreamEvent, events_since, last_seq
from predictor.store.events import NOTIFY_CHANNEL
from serving.auth import Principal

__all__ = ["StreamHub", "StreamClient", "CLOSE_TOO_SLOW", "encode_event"]

log = logging.getLogger(__name__)

#: Close code for a client that fell too far behind (4000-4999 are for applications).
CLOSE_TOO_SLOW = 4429
_FETCH_PAGE = 1000


def encode_event(event: StreamEvent) -> str:
    """The JSON text of one stream message."""
    return json.dumps(event.to_message(), separators=(",", ":"), default=str)


@dataclass(eq=False)
class StreamClient:
    """One connected client: what it may see, its bounded buffer, and whether it overflowed."""

    principal: Principal
    buffer: int
    queue: asyncio.Queue[tuple[int, str]] = field(init=False)
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)
    last_sent: int = 0  # seq of the last event written to the socket

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue(maxsize=self.buffer)

    def visible(self, event: StreamEvent) -> bool:
        return event.team is None or self.principal.can_see_team(event.team)

    def offer(self, event: StreamEvent, text: str) -> None:
        """Queue ``event`` without ever waiting; mark the client overflowed when its buffer is full."""
        if self.overflowed.is_set() or not self.visible(event):
            return
        try:
            self.queue.put_nowait((event.seq, text))
        except asyncio.QueueFull:
            self.overflowed.set()


class StreamHub:
    """Follows the event log and offers each new event to every registered client.

    Parameters
    ----------
    db : Database
        The state store whose ``stream_events`` table is followed.
    poll_s : float
        Longest wait between two reads of the log when nothing wakes the follower.
    buffer : int
        Events buffered per client before it is dropped as too slow.
    on_events : callable, optional
        Called (in a worker thread) with each batch of new events before clients see them; the
        engine uses it to apply other workers' changes (finished jobs, policy) to its caches.
    """

    def __init__(self, db: Database, *, poll_s: float, buffer: int,
                 on_events: Callable[[list[StreamEvent]], None] | None = None,
                 on_drop: Callable[[], None] | None = None) -> None:
        self.db = db
        self.poll_s = poll_s
        self.buffer = buffer
        self._on_events = on_events
        self._on_drop = on_drop
        self._clients: set[StreamClient] = set()
        self._last_seq = 0
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []

    @property
    def last_seq(self) -> int:
        """The newest seq this hub has handed to clients."""
        return self._last_seq

    @property
    def client_count(self) -> int:
        return len(self._clients)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._last_seq = await asyncio.to_thread(self._read_last_seq)
        self._tasks.append(asyncio.create_task(self._follow(), name="stream-follower"))
        if self.db.is_postgres:
            self._tasks.append(asyncio.create_task(self._listen(), name="stream-listener"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def notify(self) -> None:
        """Wake the follower now (thread-safe); called after this worker commits events."""
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    def register(self, principal: Principal) -> tuple[StreamClient, int]:
        """Add a client; returns it and the seq from which it receives live events (exclusive)."""
        client = StreamClient(principal, self.buffer)
        self._clients.add(client)
        return client, self._last_seq

    def unregister(self, client: StreamClient) -> None:
        self._clients.discard(client)

    def dropped(self) -> None:
        if self._on_drop is not None:
            self._on_drop()

    def _read_last_seq(self) -> int:
        with self.db.session() as s:
            return last_seq(s)

    def _fetch(self, since: int) -> list[StreamEvent]:
        with self.db.session() as s:
            return events_since(s, since, limit=_FETCH_PAGE)

    async def poll_once(self) -> int:
        """Read and dispatch every event after ``last_seq``; returns how many were dispatched."""
        total = 0
        while True:
            events = await asyncio.to_thread(self._fetch, self._last_seq)
            if not events:
                return total
            if self._on_events is not None:
                await asyncio.to_thread(self._on_events, events)
            for event in events:
                text = encode_event(event)
                for client in tuple(self._clients):
                    client.offer(event, text)
            self._last_seq = events[-1].seq
            total += len(events)
            if len(events) < _FETCH_PAGE:
                return total

    async def _follow(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_s)
            self._wake.clear()
            try:
                await self.poll_once()
            except Exception:  # the database may be briefly unreachable; keep following
                log.exception("stream follower: reading the event log failed; retrying")
                await asyncio.sleep(self.poll_s)

    async def _listen(self) -> None:
        """PostgreSQL LISTEN: wake the follower as soon as any worker commits events."""
        import psycopg

        dsn = make_url(self.db.url).set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    async for _ in conn.notifies():
                        assert self._wake is not None
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # fall back to polling until the listener reconnects
                log.warning("stream listener: %s; relying on polling, reconnecting in 5 s", exc)
                await asyncio.sleep(5.0)
