"""Prometheus metrics of one service process, in their own registry (so apps in tests don't clash).

With several uvicorn workers each process keeps its own counters; a scrape reaches one worker.
Queue length is read from the store at scrape time, so it is the same whichever worker answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ServiceMetrics", "CONTENT_TYPE"]

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


class ServiceMetrics:
    """The service's metrics. ``queue_counts`` returns tracked jobs per status when scraped."""

    def __init__(self, queue_counts: Callable[[], dict[str, int]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.request_seconds = Histogram(
            "predictor_http_request_duration_seconds", "HTTP request latency",
            ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=r)
        self.decisions = Counter("predictor_decisions", "Decisions made, by tier and action",
                                 ["tier", "action", "source"], registry=r)
        self.fallback_predictions = Counter(
            "predictor_fallback_predictions", "Jobs predicted by the fallback instead of a model", registry=r)
        self.model_info = Gauge("predictor_model_info", "The model in use (value 1)",
                                ["version", "fallback"], registry=r)
        self.model_reloads = Counter("predictor_model_reloads", "Model load attempts by outcome",
                                     ["outcome"], registry=r)
        self.stream_clients = Gauge("predictor_stream_clients", "Connected WebSocket stream clients", registry=r)
        self.stream_dropped = Counter("predictor_stream_dropped_clients",
                                      "Stream clients closed for falling behind", registry=r)
        self.stream_last_seq = Gauge("predictor_stream_last_seq", "Last event seq dispatched by this worker",
                                     registry=r)
        r.register(_QueueLengthCollector(queue_counts))

    def set_model(self, version: str, fallback: bool) -> None:
        self.model_info.clear()
        self.model_info.labels(version=version, fallback=str(fallback).lower()).set(1)

    def count_decisions(self, pairs: Iterable[tuple[str, str]], source: str) -> None:
        """Count decisions given as (tier, action) pairs."""
        tally: dict[tuple[str, str], int] = {}
        for key in pairs:
            tally[key] = tally.get(key, 0) + 1
        for (tier, action), n in tally.items():
            self.decisions.labels(tier=tier, action=action, source=source).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
