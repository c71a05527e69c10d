"""Prometheus metrics of one service process, in their own registry (so apps in tests don't clash).

With several uvicorn workers each process keeps its own counters; a scrape reaches one worker.
Queue length and the outbox (``predictor.adapters.metrics.OutboxCollector``, which the sync loop
exports too) are read from the store at scrape time, so they are the same whichever worker answers. What an operator alerts on (deploy/monitoring/alerts.yaml, docs/deployment.md):

==========================================================  =============================================
metric                                                      meaning
==========================================================  =============================================
``predictor_decision_duration_seconds{source}``             time to predict and decide: ``score`` one
                                                            ``POST /v1/score`` batch, ``queue`` one job
                                                            submitted or changed (includes the re-plan)
``predictor_model_fallback``                                1 while the analytic fallback answers
``predictor_model_age_seconds``                             since the served version was registered
                                                            (absent with the fallback)
``predictor_outbox_items{target,status}``                   decisions queued for a scheduler, by status
                                                            (pending, delivered, dead)
``predictor_outbox_oldest_pending_age_seconds{target}``     age of the oldest undelivered decision (0: none)
``predictor_shed_requests_total{reason}``                   requests answered 503 at once: ``queue_full``,
                                                            ``queue_wait`` (``serving.load_shedding``)
``predictor_degraded_requests_total{reason}``               score requests the fallback answered because
                                                            the model would miss their ``deadline``
``predictor_inline_scores_total``                          score requests scored on the event loop (alone
                                                            in the worker and short), not in a thread
``predictor_worker_cpu_seconds{pid}``                       CPU time this worker process used so far
                                                            (``time.process_time``; one series per worker)
==========================================================  =============================================
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from predictor.adapters.metrics import OutboxBacklog, OutboxCollector

__all__ = ["ServiceMetrics", "OutboxBacklog", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _QueueLengthCollector(Collector):
    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("predictor_queue_jobs", "Tracked jobs by status (read from the store)",
                                 labels=["status"])

    def describe(self) -> Iterable[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = self._family()
        for status, n in sorted(self._counts().items()):
            family.add_metric([status], float(n))
        yield family


class _WorkerCpuCollector(Collector):
    """CPU seconds of this process (user + system), labelled with its pid: a scrape reaches one worker,
    so a benchmark that scrapes until it has seen every pid adds them up."""

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("predictor_worker_cpu_seconds", "CPU seconds this worker process used so far",
                                 labels=["pid"])

    def describe(self) -> Iterable[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = self._family()
        family.add_metric([str(os.getpid())], time.process_time())
        yield family


class _ModelAgeCollector(Collector):
    def __init__(self, created_ts: Callable[[], float | None], clock: Callable[[], float]) -> None:
        self._created_ts = created_ts
        self._clock = clock

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("predictor_model_age_seconds",
                                 "Seconds since the served model version was registered (absent with the fallback)")

    def describe(self) -> Iterable[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = self._family()
        created = self._created_ts()
        if created is not None:
            family.add_metric([], max(self._clock() - created, 0.0))
        yield family


class ServiceMetrics:
    """The service's metrics.

    Parameters
    ----------
    queue_counts : callable () -> dict
        Tracked jobs per status, read when scraped.
    outbox_backlog : callable () -> list of OutboxBacklog, optional
        The outbox per delivery target, read when scraped.
    clock : callable () -> float
        Wall clock (epoch seconds) for the ages.
    """

    def __init__(self, queue_counts: Callable[[], dict[str, int]],
                 outbox_backlog: Callable[[], list[OutboxBacklog]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.request_seconds = Histogram(
            "predictor_http_request_duration_seconds", "HTTP request latency",
            ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=r)
        self.decision_seconds = Histogram(
            "predictor_decision_duration_seconds",
            "Time to predict and decide (score: one batch; queue: one job change with its re-plan)",
            ["source"], buckets=LATENCY_BUCKETS, registry=r)
        self.decisions = Counter("predictor_decisions", "Decisions made, by tier and action",
                                 ["tier", "action", "source"], registry=r)
        self.fallback_predictions = Counter(
            "predictor_fallback_predictions", "Jobs predicted by the fallback instead of a model", registry=r)
        self.model_info = Gauge("predictor_model_info", "The model in use (value 1)",
                                ["version", "fallback"], registry=r)
        self.model_fallback = Gauge("predictor_model_fallback",
                                    "1 while the analytic fallback answers instead of a registered model", registry=r)
        self.model_compiling = Gauge("predictor_model_compiling",
                                     "1 while the model in use answers with LightGBM and compiles its boosters",
                                     registry=r)
        self.model_boosters = Gauge("predictor_model_boosters",
                                    "Boosters of the model in use, by state (total, compiled)", ["state"], registry=r)
        self.model_reloads = Counter("predictor_model_reloads", "Model load attempts by outcome",
                                     ["outcome"], registry=r)
        self.stream_clients = Gauge("predictor_stream_clients", "Connected WebSocket stream clients", registry=r)
        self.stream_dropped = Counter("predictor_stream_dropped_clients",
                                      "Stream clients closed for falling behind", registry=r)
        self.stream_last_seq = Gauge("predictor_stream_last_seq", "Last event seq dispatched by this worker",
                                     registry=r)
        self.shed_requests = Counter("predictor_shed_requests", "Requests answered 503 at once (over capacity)",
                                     ["reason"], registry=r)
        self.degraded_requests = Counter(
            "predictor_degraded_requests", "Score requests answered by the fallback instead of the model",
            ["reason"], registry=r)
        self.inline_scores = Counter("predictor_inline_scores",
                                     "Score requests scored on the event loop (alone in the worker and short)", registry=r)
        self._model_created_ts: float | None = None
        r.register(_WorkerCpuCollector())
        r.register(_QueueLengthCollector(queue_counts))
        r.register(_ModelAgeCollector(lambda: self._model_created_ts, clock))
        if outbox_backlog is not None:
            r.register(OutboxCollector(outbox_backlog, clock))

    def set_model(self, version: str, fallback: bool, created_ts: float | None = None) -> None:
        """Record the model in use; ``created_ts`` is when its version was registered (if known)."""
        self.model_info.clear()
        self.model_info.labels(version=version, fallback=str(fallback).lower()).set(1)
        self.model_fallback.set(1 if fallback else 0)
        self._model_created_ts = None if fallback else created_ts

    @contextmanager
    def time_decision(self, source: str) -> Iterator[None]:
        """Observe the time the block takes in ``predictor_decision_duration_seconds{source}``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.decision_seconds.labels(source=source).observe(time.perf_counter() - started)

    def count_decisions(self, pairs: Iterable[tuple[str, str]], source: str) -> None:
        """Count decisions given as (tier, action) pairs."""
        tally: dict[tuple[str, str], int] = {}
        for key in pairs:
            tally[key] = tally.get(key, 0) + 1
        for (tier, action), n in tally.items():
            self.decisions.labels(tier=tier, action=action, source=source).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
