"""Degrade instead of collapse: bounded work per worker, shed the rest at once, answer by a deadline.

A scheduler's admission webhook calls ``POST /v1/score`` with a timeout of a few seconds shared with
everything else; a request that waits in a queue until it is seconds old is worse than an immediate
"try again". Each uvicorn worker has one event loop and scores with the GIL held, so without a
bound every request that arrives faster than the worker scores waits behind all earlier ones, and
latency grows without limit (measured before this: 200 requests/s offered on a loaded host, p50 19 s).

:class:`LoadSheddingMiddleware` (every ``/v1/`` HTTP request; health, metrics, the dashboard and the
WebSocket stream are not limited):

* at most ``max_concurrency`` requests are in progress in the worker; up to ``max_queue`` more wait
  for one of those slots, first come first served;
* a request beyond that, or one that waited ``queue_wait_ms`` for a slot, is answered at once:
  ``503 Service Unavailable`` with ``Retry-After`` and ``{"detail": ..., "reason": "queue_full" |
  "queue_wait" | "expected_wait"}``, without reading or validating its body. A shed request costs a fraction of a
  millisecond, so shedding drains a burst instead of adding to it;
* a request is counted the moment it reaches the middleware and then yields to the event loop once,
  so all requests read in one pass of the loop are counted before the first is scored: a handler
  that never awaits (scoring is CPU work on the loop) runs to its end once resumed, and counting
  later would see one request at a time while the rest wait unseen;
* a request whose turn comes after ``queue_wait_ms`` is shed then rather than served late;
* a request that would wait longer than ``queue_wait_ms`` is shed on arrival, without waiting to
  find out (``expected_wait``): the middleware keeps an exponentially weighted mean of how long a
  request holds a slot, and a request that arrives with ``k`` requests queued ahead of it beyond
  the free slots expects to wait ``k`` x that mean / ``max_concurrency``. Under a steady overload the
  queue then holds about ``queue_wait_ms`` of work, so accepted requests finish within about
  ``queue_wait_ms`` plus their own time, and the rest are answered at once (2 ms median
  over HTTP at 800 requests/s, docs/benchmarks.md).

:func:`alone` tells a handler that its request is the only one the middleware holds (``POST
/v1/score`` then scores a short request on the event loop instead of handing it to a thread: there is
nothing else to read or shed meanwhile, docs/serving.md).

The time a request arrived (when this worker read it) is put in ``scope["state"]["arrived_at"]``
(``time.perf_counter``); ``POST /v1/score`` reads it for its deadline: the caller's
``X-Deadline-Ms`` header says how many milliseconds it still waits. When what is left is less than
what the model took for a batch that size lately (:class:`ScoreCost`), the analytic fallback
answers instead, and the response says ``"degraded": "deadline"`` (header ``X-Degraded``).
``/metrics`` counts both: ``predictor_shed_requests_total{reason}``,
``predictor_degraded_requests_total{reason}``.
"""

from __future__ import annotations

import asyncio
import collections
import time

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LoadSheddingMiddleware", "ScoreCost", "arrived_at", "alone", "SHED_STATUS"]

#: The status of a shed request (the service is over its capacity; the request itself is fine).
SHED_STATUS = 503


def arrived_at(scope: Scope) -> float:
    """When this worker read the request (``time.perf_counter``); now if no middleware stamped it."""
    state = scope.get("state") or {}
    return float(state.get("arrived_at", time.perf_counter()))


def alone(scope: Scope) -> bool:
    """Whether this request is the only ``/v1/`` request in its worker right now: none other is in
    progress, waiting for a slot or read and about to ask for one (False where no
    :class:`LoadSheddingMiddleware` counted it). Read it just before work that does not yield: the
    count only grows when the event loop runs."""
    shedder = (scope.get("state") or {}).get("load_shedding")
    return shedder is not None and shedder.present <= 1


class LoadSheddingMiddleware:
    """Bounded concurrency and a bounded queue per worker (module docstring).

    Parameters
    ----------
    app : ASGI app
    max_concurrency : int
        Requests in progress at once.
    max_queue : int
        Requests that may wait for a slot beyond those.
    queue_wait_ms : float
        Longest wait for a slot; a request that waited longer is shed when its turn comes.
    retry_after_s : int
        ``Retry-After`` of a shed request.
    prefix : str
        Paths limited (``/v1/``: the API).
    """

    def __init__(self, app: ASGIApp, *, max_concurrency: int = 2, max_queue: int = 16, queue_wait_ms: float = 40.0,
                 retry_after_s: int = 1, prefix: str = "/v1/") -> None:
        self.app = app
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.queue_wait_s = queue_wait_ms / 1000.0
        self.retry_after = str(int(retry_after_s)).encode()
        self.prefix = prefix
        self.active = 0  # requests holding a slot
        self.present = 0  # requests in this middleware: holding a slot, waiting for one, or about to ask
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self.hold_s = 0.0  # exponentially weighted time a request holds a slot (0: none seen yet)
        self.hold_weight = 0.2

    @property
    def waiting(self) -> int:
        return sum(not f.done() for f in self._waiters)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()
        state = scope.setdefault("state", {})
        state["arrived_at"] = arrived
        state["load_shedding"] = self  # alone(scope): how many requests this worker holds
        # Counted on arrival, before anything yields: a handler that never awaits runs to its end once
        # resumed, so the requests read in one pass of the event loop must all be counted first.
        if self.present >= self.max_concurrency + self.max_queue:
            await self._shed(scope, send, "queue_full")
            return
        if self.expected_wait_s() > self.queue_wait_s:
            await self._shed(scope, send, "expected_wait")
            return
        self.present += 1
        try:
            await asyncio.sleep(0)  # let every request read in this pass be counted
            reason = await self._acquire(arrived)
            if reason is not None:
                await self._shed(scope, send, reason)
                return
            started = time.perf_counter()
            try:
                await self.app(scope, receive, send)
            finally:
                self._release()
                held = time.perf_counter() - started
                self.hold_s = held if self.hold_s == 0.0 else self.hold_s + self.hold_weight * (held - self.hold_s)
        finally:
            self.present -= 1

    def expected_wait_s(self) -> float:
        """How long a request arriving now would wait for a slot: the requests ahead of it beyond the
        free slots, each holding one for the mean hold time, ``max_concurrency`` at a time."""
        ahead = self.present - self.max_concurrency + 1
        return ahead * self.hold_s / self.max_concurrency if ahead > 0 else 0.0

    async def _acquire(self, arrived: float) -> str | None:
        """Take a slot (None), or say why not (``queue_wait``: waited too long for one)."""
        if self.active < self.max_concurrency and not self.waiting:
            self.active += 1
        else:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, self.queue_wait_s)
            except TimeoutError:
                self._forget(fut)
                return "queue_wait"
            except asyncio.CancelledError:  # the server is stopping: give back a slot handed over meanwhile
                if fut.done() and not fut.cancelled():
                    self._release()
                self._forget(fut)
                raise
            # the slot was handed over by _release (active unchanged)
        if time.perf_counter() - arrived > self.queue_wait_s:  # its turn came too late: shed it now
            self._release()
            return "queue_wait"
        return None

    def _forget(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def _release(self) -> None:
        """Hand the slot to the longest waiting request, or free it."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.active -= 1

    async def _shed(self, scope: Scope, send: Send, reason: str) -> None:
        service = getattr(scope["app"].state, "service", None) if "app" in scope else None
        if service is not None:
            service.metrics.shed_requests.labels(reason=reason).inc()
        body = orjson.dumps({"detail": "the service is at capacity; retry after the time in Retry-After",
                             "reason": reason})
        await send({"type": "http.response.start", "status": SHED_STATUS,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"retry-after", self.retry_after), (b"x-shed-reason", reason.encode())]})
        await send({"type": "http.response.body", "body": body})


class ScoreCost:
    """What scoring with the model took lately: ``fixed_ms`` per request plus ``per_job_ms`` per job
    (exponentially weighted; a single job updates the first, a batch the second)."""

    def __init__(self, *, fixed_ms: float = 5.0, per_job_ms: float = 0.2, weight: float = 0.1) -> None:
        self.fixed_ms = fixed_ms
        self.per_job_ms = per_job_ms
        self.weight = weight

    def observe(self, n_jobs: int, seconds: float) -> None:
        ms = 1000.0 * seconds
        w = self.weight
        if n_jobs <= 1:
            self.fixed_ms += w * (ms - self.fixed_ms)
        else:
            per_job = max(ms - self.fixed_ms, 0.0) / (n_jobs - 1)
            self.per_job_ms += w * (per_job - self.per_job_ms)

    def estimate_ms(self, n_jobs: int) -> float:
        return self.fixed_ms + self.per_job_ms * max(n_jobs - 1, 0)
