"""Everything one service process holds, built once at start-up from the settings."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from dataclasses import dataclass, field

from features.errors import InputError
from predictor.adapters.metrics import backlog_from_store
from predictor.engine.engine import Engine
from predictor.engine.model_slot import LoadedModel, ModelSlot
from predictor.engine.wiring import build_engine
from predictor.queue.queue_estimates import QueueEstimates
from predictor.queue.tracked_queue import TrackedQueue
from predictor.store import Database, StreamEvent
from predictor.store.jobs import status_counts
from serving.auth import TokenRegistry
from serving.load_shedding import ScoreCost
from serving.metrics import OutboxBacklog, ServiceMetrics
from serving.schemas.results import ModelStatusPublic
from serving.settings import Settings
from serving.stream import EstimateFeed, StreamHub

__all__ = ["Service", "build_service"]

log = logging.getLogger(__name__)

#: Seconds between two background re-plans (reservations start, priorities age).
REPLAN_INTERVAL_S = 30.0


@dataclass
class Service:
    """The service's parts: store, engine, tracked queue, stream hub, metrics and tokens."""

    settings: Settings
    db: Database
    engine: Engine
    queue: TrackedQueue
    hub: StreamHub
    metrics: ServiceMetrics
    tokens: TokenRegistry
    score_cost: ScoreCost = field(default_factory=ScoreCost)  # what the model took lately (deadlines)
    started_at: float = field(default_factory=time.time)
    _tasks: list[asyncio.Task] = field(default_factory=list)

    def model_status(self) -> ModelStatusPublic:
        slot = self.engine.model
        m = slot.current
        warm = slot.warmup if slot.warmup is not None and slot.warmup.version == m.version else None
        return ModelStatusPublic(uri=slot.uri, version=m.version, fallback=m.fallback,
                                 fallback_reason=m.fallback_reason, loaded_at=None if m.fallback else m.loaded_at,
                                 last_checked_at=slot.last_checked_at, last_error=slot.last_error,
                                 compiling=warm is not None and not warm.done,
                                 boosters=None if warm is None else warm.counts.get("boosters"),
                                 boosters_compiled=None if warm is None else warm.counts.get("compiled"))

    def model_headers(self) -> list[tuple[bytes, bytes]]:
        m = self.engine.model.current
        return [(b"x-model-version", m.version.encode()), (b"x-model-fallback", b"true" if m.fallback else b"false")]

    def refresh_gauges(self) -> None:
        self.metrics.stream_clients.set(self.hub.client_count)
        self.metrics.stream_last_seq.set(self.hub.last_seq)
        model = self.model_status()
        self.metrics.model_compiling.set(1 if model.compiling else 0)
        if model.boosters is not None:
            self.metrics.model_boosters.labels(state="total").set(model.boosters)
            self.metrics.model_boosters.labels(state="compiled").set(model.boosters_compiled or 0)

    def queue_counts(self) -> dict[str, int]:
        with self.db.session() as s:
            counts = status_counts(s)
        return {status: counts.get(status, 0) for status in ("pending", "running", "ended", "cancelled")}

    def outbox_backlog(self) -> list[OutboxBacklog]:
        return backlog_from_store(self.db)

    def committed(self, events: list[StreamEvent]) -> None:
        """After this worker commits: wake the stream follower, count the decisions it made."""
        self.hub.notify()
        self.metrics.count_decisions(((e.payload["decision"]["tier"], e.payload["decision"]["action"])
                                      for e in events if e.kind == "decision"), source="queue")

    def on_model_change(self, model: LoadedModel) -> None:
        self.metrics.set_model(model.version, model.fallback, None if model.fallback else self._registered_ts(model))
        self.metrics.model_reloads.labels(outcome="fallback" if model.fallback else "loaded").inc()
        # In the reload thread, not in the first request after the swap: copy the model's history for
        # the features, then take what loading created (modules MLflow imported, the bundle) out of
        # the garbage collector's scans, as at start-up.
        self.engine.prepare_history()
        gc.freeze()

    def _registered_ts(self, model: LoadedModel) -> float | None:
        """When the loaded version was registered in MLflow (None when unknown: the metric is left out)."""
        name, _, number = model.version.rpartition("/")
        if not name or not number.isdigit():
            return None
        from models.registry import version_registered_ts

        try:
            return version_registered_ts(name, number, tracking_uri=self.settings.mlflow_tracking_uri)
        except Exception:  # the registry answered the load a moment ago; a metric never fails a swap
            log.warning("could not read when %s was registered", model.version, exc_info=True)
            return None

    async def start(self) -> None:
        """Start the model reload thread, the stream follower and the periodic re-plan."""
        self.metrics.set_model(self.engine.model.current.version, True)
        self.engine.model.start()
        await self.hub.start()
        self._tasks.append(asyncio.create_task(self._replan_forever(), name="replan"))
        # Everything loaded so far lives as long as the process: keep it out of the garbage collector's
        # scans, which otherwise cost tens of milliseconds on a heap holding pandas, LightGBM and MLflow.
        gc.freeze()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.hub.stop()
        self.engine.model.stop()
        self.db.dispose()

    async def _replan_forever(self) -> None:
        while True:
            await asyncio.sleep(REPLAN_INTERVAL_S)
            try:
                await asyncio.to_thread(self.queue.tick)
            except Exception:  # keep re-planning; the next request re-plans anyway
                log.exception("periodic re-plan failed")


def build_service(settings: Settings, *, model: ModelSlot | None = None) -> Service:
    """Connect, migrate, load the policy, inventory and queue; the model loads in the background.

    Raises
    ------
    InputError
        No API token is configured, or a setting, the policy or the inventory is invalid.
    """
    tokens = TokenRegistry.from_settings(settings)
    if len(tokens) == 0:
        raise InputError("no API tokens configured: set PREDICTOR_TOKENS_FILE (or PREDICTOR_TOKENS); "
                         "see docs/serving.md (Tokens and roles) for the format")
    db = Database(settings.database_url)
    if settings.migrate_on_start:
        db.upgrade()
    engine, policy = build_engine(settings, model=model)
    queue = TrackedQueue(db, engine, outbox_targets=settings.outbox_targets)
    queue.load(policy)
    service: Service
    metrics = ServiceMetrics(queue_counts=lambda: service.queue_counts(), outbox_backlog=lambda: service.outbox_backlog())
    hub = StreamHub(db, poll_s=settings.stream_poll_s, buffer=settings.stream_buffer, on_events=queue.catch_up)
    service = Service(settings=settings, db=db, engine=engine, queue=queue, hub=hub, metrics=metrics, tokens=tokens)
    queue.on_commit = service.committed
    estimates = QueueEstimates(engine, db)  # the kept plan explain, /v1/queue and the stream read
    service._queue_estimates = estimates  # type: ignore[attr-defined]  # noqa: SLF001
    hub.feed = EstimateFeed(estimates.snapshot)
    engine.model.subscribe(service.on_model_change)
    return service
