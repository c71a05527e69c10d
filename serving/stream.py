"""The live stream's hub: follows the store's event log and fans events out to WebSocket clients.

Protocol (``/v1/stream``, see docs/serving.md, The stream):

1. The server sends ``{"kind": "stream.hello", "last_seq": L, "since": S}``.
2. With ``?since=S`` it replays every stored event with ``S < seq <= L`` from the store, then goes
   on live; without it, it goes live from ``L``. Every event carries its ``seq``; a client keeps the
   last one it saw and reconnects with ``?since=<that>`` to miss nothing.
3. A client that falls more than ``buffer`` events behind is closed with code ``4429`` and a reason
   naming the last ``seq`` it was sent; it reconnects with ``since``. One slow client therefore never
   holds up the server or the other clients: the hub only ever does ``put_nowait``.

Start estimates (rule *estimates on the stream*): after a batch of queue changes (``job.*``,
``decision``, ``reservation.*``, ``policy.updated``) the hub's :class:`EstimateFeed` re-reads the
start estimates of every pending job, for the clients that connected with ``?estimates=true`` (``QueueEstimates.snapshot``: the kept plan, refreshed for the
new queue) at most once per ``min_interval_s``, and sends each client the estimates that moved
materially since the last message, as ``{"kind": "start_estimates", "as_of_seq", "ts", "full":
false, "estimates": {job_id: {p10_ts, p50_ts, p90_ts, basis}}, "removed": [job_id, ...]}``. These
messages are derived state, not events: they carry no ``seq``, are not stored and are not replayed;
instead every client gets a ``"full": true`` message with all current estimates it may see right
after the hello (and the replay). Members see only their team's jobs.

Every worker runs one hub. Its follower reads the event log by ``seq`` (woken at once by this worker's
own writes, by PostgreSQL ``NOTIFY`` from other workers, or else every ``poll_s`` seconds where
SQLite's data version says another connection committed), so an event written by any worker
reaches every client of every worker, in ``seq`` order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

from predictor.store import Database, StreamEvent, events_since, last_seq
from predictor.store.database import DataVersionProbe
from predictor.store.events import NOTIFY_CHANNEL
from serving.auth import Principal

__all__ = ["StreamHub", "StreamClient", "EstimateFeed", "CLOSE_TOO_SLOW", "encode_event", "ESTIMATE_KIND"]

log = logging.getLogger(__name__)

#: Close code for a client that fell too far behind (4000-4999 are for applications).
CLOSE_TOO_SLOW = 4429
_FETCH_PAGE = 1000
#: Seconds between the follower's timed reads while PostgreSQL's listener wakes it (a safety net).
LISTENING_POLL_S = 5.0
#: The kind of the (unnumbered) start-estimate messages.
ESTIMATE_KIND = "start_estimates"
_ESTIMATE_TRIGGERS = ("job.", "decision", "reservation.", "policy.")
_ESTIMATE_FIELDS = ("p10_ts", "p50_ts", "p90_ts", "basis")


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
    estimates: bool = False  # receives the start-estimate messages (``?estimates=true``)

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue(maxsize=self.buffer)

    def visible(self, event: StreamEvent) -> bool:
        return event.team is None or self.principal.can_see_team(event.team)

    def offer(self, event: StreamEvent, text: str) -> None:
        """Queue ``event`` without ever waiting; mark the client overflowed when its buffer is full."""
        if self.overflowed.is_set() or not self.visible(event):
            return
        self._put(event.seq, text)

    def offer_unnumbered(self, text: str) -> None:
        """Queue a message without a ``seq`` (start estimates), with the same overflow rule."""
        if self.estimates and not self.overflowed.is_set():
            self._put(None, text)

    def _put(self, seq: int | None, text: str) -> None:
        try:
            self.queue.put_nowait((seq, text))
        except asyncio.QueueFull:
            self.overflowed.set()


def _moved(old: dict | None, new: dict, now: float, min_change_s: float) -> bool:
    """Rule *material estimate change*: new, another basis, or a bound moved by more than
    ``max(min_change_s, 10 % of the wait to the new p50)`` (None counts as infinitely far)."""
    if old is None or old["basis"] != new["basis"]:
        return True
    p50 = new["p50_ts"]
    tol = max(min_change_s, 0.1 * max((p50 if p50 is not None else now) - now, 0.0))
    for key in ("p10_ts", "p50_ts", "p90_ts"):
        a, b = old[key], new[key]
        if (a is None) != (b is None) or (a is not None and abs(a - b) > tol):
            return True
    return False


class EstimateFeed:
    """What the stream says about start estimates: the estimates last sent (what every client has been
    told) and the deltas against them. ``snapshot`` returns an ``EstimateSnapshot``
    (``predictor.queue.queue_estimates``): ``as_of_seq``, ``made_at``, ``jobs`` = {job id: (team, estimate)}.
    """

    def __init__(self, snapshot: Callable[[], object], *, min_interval_s: float = 1.0,
                 min_change_s: float = 60.0) -> None:
        if min_interval_s < 0 or min_change_s < 0:
            raise ValueError("EstimateFeed: min_interval_s and min_change_s must be >= 0")
        self._snapshot = snapshot
        self.min_interval_s, self.min_change_s = float(min_interval_s), float(min_change_s)
        self.sent: dict[str, tuple[str | None, dict]] = {}  # job id -> (team, estimate as last sent)
        self.as_of_seq = 0
        self.made_at: float | None = None
        self._lock = threading.Lock()

    def update(self) -> tuple[dict[str, tuple[str | None, dict]], dict[str, str | None]]:
        """Read the current estimates (blocking: call in a thread); returns the jobs whose estimate
        moved materially (job id -> (team, estimate)) and the jobs no longer pending (job id -> team),
        and makes them the estimates last sent."""
        with self._lock:
            return self._update()

    def _update(self) -> tuple[dict[str, tuple[str | None, dict]], dict[str, str | None]]:
        snap = self._snapshot()
        now = snap.made_at
        changed: dict[str, tuple[str | None, dict]] = {}
        for job_id, (team, doc) in snap.jobs.items():
            new = {k: doc.get(k) for k in _ESTIMATE_FIELDS}
            old = self.sent.get(job_id)
            if _moved(None if old is None else old[1], new, now, self.min_change_s):
                changed[job_id] = (team, new)
        removed = {j: t for j, (t, _) in self.sent.items() if j not in snap.jobs}
        for j in removed:
            del self.sent[j]
        self.sent.update(changed)
        self.as_of_seq, self.made_at = int(snap.as_of_seq), float(snap.made_at)
        return changed, removed

    def message(self, principal: Principal, jobs: dict[str, tuple[str | None, dict]],
                removed: dict[str, str | None], *, full: bool) -> str | None:
        """The message ``principal`` may see (None when a delta holds nothing for it); ``full``: all
        the estimates last sent (``jobs`` and ``removed`` are ignored)."""
        if full:
            with self._lock:
                jobs, removed = dict(self.sent), {}
        mine = {j: doc for j, (team, doc) in jobs.items() if team is None or principal.can_see_team(team)}
        gone = [j for j, team in removed.items() if team is None or principal.can_see_team(team)]
        if not full and not mine and not gone:
            return None
        return json.dumps({"kind": ESTIMATE_KIND, "as_of_seq": self.as_of_seq, "ts": self.made_at, "full": full,
                           "estimates": mine, "removed": gone}, separators=(",", ":"))


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
                 on_drop: Callable[[], None] | None = None, feed: EstimateFeed | None = None) -> None:
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
        self.feed = feed
        self._estimates_wanted: asyncio.Event | None = None
        self._probe: DataVersionProbe | None = None
        self._listening = False  # PostgreSQL's LISTEN connection is up (it wakes the follower)

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
        self._estimates_wanted = asyncio.Event()
        self._last_seq = await asyncio.to_thread(self._read_last_seq)
        self._tasks.append(asyncio.create_task(self._follow(), name="stream-follower"))
        if self.feed is not None:
            self._tasks.append(asyncio.create_task(self._feed_estimates(), name="stream-estimates"))
        if self.db.is_postgres:
            self._tasks.append(asyncio.create_task(self._listen(), name="stream-listener"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    def notify(self) -> None:
        """Wake the follower now (thread-safe); called after this worker commits events."""
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    def register(self, principal: Principal, *, estimates: bool = False) -> tuple[StreamClient, int]:
        """Add a client; returns it and the seq from which it receives live events (exclusive).
        ``estimates``: it also receives the start-estimate messages."""
        client = StreamClient(principal, self.buffer, estimates=estimates)
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
            if self._estimates_wanted is not None and any(e.kind.startswith(_ESTIMATE_TRIGGERS) for e in events):
                self._estimates_wanted.set()
            total += len(events)
            if len(events) < _FETCH_PAGE:
                return total

    async def first_estimates(self, client: StreamClient) -> str | None:
        """The ``full`` start-estimate message for a client that just connected (None: no feed). If
        the queue changed since the estimates last sent, they are read first and the delta offered to
        every client (the new one included: it repeats what the full message says)."""
        if self.feed is None or not client.estimates:
            return None
        if self.feed.made_at is None or self.feed.as_of_seq < self._last_seq:
            await self._update_and_offer()
        return self.feed.message(client.principal, {}, {}, full=True)

    async def _update_and_offer(self) -> None:
        assert self.feed is not None
        try:
            changed, removed = await asyncio.to_thread(self.feed.update)
        except Exception:  # keep feeding; the next change retries
            log.exception("stream: reading the start estimates failed")
            return
        texts: dict[tuple[bool, str | None], str | None] = {}
        for client in tuple(self._clients):
            if not client.estimates:
                continue
            p = client.principal
            key = (p.is_member, p.team if p.is_member else None)
            if key not in texts:
                texts[key] = self.feed.message(p, changed, removed, full=False)
            if texts[key] is not None:
                client.offer_unnumbered(texts[key])

    async def _feed_estimates(self) -> None:
        """Rule *estimates on the stream* (module docstring): coalesced, at most once per ``min_interval_s``."""
        assert self._estimates_wanted is not None and self.feed is not None
        while True:
            await self._estimates_wanted.wait()
            self._estimates_wanted.clear()
            if not any(c.estimates for c in self._clients):
                continue
            await self._update_and_offer()
            await asyncio.sleep(self.feed.min_interval_s)

    async def _follow(self) -> None:
        """Read the event log whenever it may have grown: at once when woken (this worker's own
        commit, a PostgreSQL ``NOTIFY``), else every ``poll_s`` seconds, where the store's change
        probe (SQLite's data version, ``Database.change_probe``) says someone committed since the last
        read; with no probe, every ``poll_s`` seconds. While PostgreSQL's listener is connected it
        wakes the follower for every commit, so the timed read is only a safety net, every
        ``LISTENING_POLL_S``. An idle worker then costs almost nothing (a read of the log through a
        thread and a session every quarter second was ~1 % of a core per worker)."""
        assert self._wake is not None
        probe = self._probe = self.db.change_probe()
        seen: int | None = None
        last_read = 0.0
        loop = asyncio.get_running_loop()
        while True:
            woken = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_s)
                woken = True
            self._wake.clear()
            if probe is not None:
                try:
                    version = probe()
                except Exception:  # the file moved or broke: read the log every time from now on
                    log.warning("stream follower: the store's change probe failed; polling", exc_info=True)
                    probe.close()
                    probe = self._probe = None
                else:
                    if version == seen and not woken:
                        continue  # nobody committed since the last read
                    seen = version  # read before the log: a commit after this changes it again
            elif not woken and self._listening and loop.time() - last_read < LISTENING_POLL_S:
                continue
            last_read = loop.time()
            try:
                await self.poll_once()
            except Exception:  # the database may be briefly unreachable; keep following
                log.exception("stream follower: reading the event log failed; retrying")
                seen = None
                await asyncio.sleep(self.poll_s)

    async def _listen(self) -> None:
        """PostgreSQL LISTEN: wake the follower as soon as any worker commits events."""
        import psycopg

        dsn = make_url(self.db.url).set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    assert self._wake is not None
                    self._listening = True
                    self._wake.set()  # read what was committed before the LISTEN took effect
                    async for _ in conn.notifies():
                        self._wake.set()
            except asyncio.CancelledError:
                self._listening = False
                raise
            except Exception as exc:  # fall back to polling until the listener reconnects
                self._listening = False
                log.warning("stream listener: %s; relying on polling, reconnecting in 5 s", exc)
                await asyncio.sleep(5.0)
