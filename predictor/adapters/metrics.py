"""Prometheus metrics of the delivery side: the outbox backlog (read from the store at scrape time,
exported by the API's ``/metrics`` and by the sync loop) and the sync loop's own passes and errors.

The sync loop runs in its own process; ``predictor sync --metrics-bind host:port`` serves these
with prometheus_client's HTTP server (``/metrics`` on that port):

=====================================================  ==================================================
metric                                                 meaning
=====================================================  ==================================================
``predictor_sync_passes_total{target,outcome}``        passes: ``ok``, or ``unavailable`` (the cluster
                                                       could not be read)
``predictor_sync_errors_total{target,kind}``           ``unavailable`` (a pass could not read the
                                                       cluster), ``delivery_retry`` (a decision's
                                                       delivery failed and will be retried),
                                                       ``delivery_rejected`` (refused for good),
                                                       ``plan`` (a dry run could not plan a job)
``predictor_sync_last_success_timestamp_seconds``      when a pass last completed
``predictor_sync_last_pass_duration_seconds``          how long that pass took
``predictor_sync_jobs{target,state}``                  pending / running jobs the last pass read
``predictor_outbox_items``, ``..._oldest_pending_age_seconds``  the outbox of the loop's own database
=====================================================  ==================================================
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["OutboxBacklog", "OutboxCollector", "SyncMetrics", "parse_bind"]


@dataclass(frozen=True, slots=True)
class OutboxBacklog:
    """One delivery target's outbox: items per status and when the oldest pending one was queued."""

    target: str
    counts: dict[str, int]
    oldest_pending_ts: float | None


def backlog_from_store(db: Any) -> list[OutboxBacklog]:
    """The outbox of ``db`` (a ``predictor.store.Database``) per target."""
    from predictor.store.outbox import outbox_backlog

    with db.session() as s:
        backlog = outbox_backlog(s)
    return [OutboxBacklog(target, counts, oldest) for target, (counts, oldest) in backlog.items()]


class OutboxCollector(Collector):
    """``predictor_outbox_items{target,status}`` and ``predictor_outbox_oldest_pending_age_seconds{target}``."""

    STATUSES = ("pending", "delivered", "dead")

    def __init__(self, backlog: Callable[[], list[OutboxBacklog]], clock: Callable[[], float] = time.time) -> None:
        self._backlog = backlog
        self._clock = clock

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (GaugeMetricFamily("predictor_outbox_items", "Decisions in the outbox by target and status",
                                  labels=["target", "status"]),
                GaugeMetricFamily("predictor_outbox_oldest_pending_age_seconds",
                                  "Seconds since the oldest decision not yet delivered was queued (0: none)",
                                  labels=["target"]))

    def describe(self) -> Iterable[GaugeMetricFamily]:
        yield from self._families()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        items, oldest = self._families()
        now = self._clock()
        for b in sorted(self._backlog(), key=lambda b: b.target):
            for status in self.STATUSES:
                items.add_metric([b.target, status], float(b.counts.get(status, 0)))
            age = 0.0 if b.oldest_pending_ts is None else max(now - b.oldest_pending_ts, 0.0)
            oldest.add_metric([b.target], age)
        yield items
        yield oldest


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9108`` for IPv6) -> (host, port).

    Raises
    ------
    ValueError
        Not ``host:port`` with a port in 1..65535.
    """
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {bind!r}")
    return host.strip("[]"), int(port)


class SyncMetrics:
    """The sync loop's metrics, in their own registry."""

    def __init__(self, target: str, outbox_backlog: Callable[[], list[OutboxBacklog]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.target = target
        self.clock = clock
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.passes = Counter("predictor_sync_passes", "Sync passes by outcome", ["target", "outcome"], registry=r)
        self.errors = Counter("predictor_sync_errors", "Sync errors by kind", ["target", "kind"], registry=r)
        self.last_success = Gauge("predictor_sync_last_success_timestamp_seconds",
                                  "When a sync pass last completed (epoch seconds)", ["target"], registry=r)
        self.last_duration = Gauge("predictor_sync_last_pass_duration_seconds",
                                   "How long the last completed pass took", ["target"], registry=r)
        self.jobs = Gauge("predictor_sync_jobs", "Jobs the last pass read, by state", ["target", "state"], registry=r)
        for kind in ("unavailable", "delivery_retry", "delivery_rejected", "plan"):
            self.errors.labels(target=target, kind=kind)  # every kind exported from the start, at 0
        for outcome in ("ok", "unavailable"):
            self.passes.labels(target=target, outcome=outcome)
        if outbox_backlog is not None:
            r.register(OutboxCollector(outbox_backlog, clock))

    def pass_done(self, report: Any, seconds: float) -> None:
        """Record a completed pass (a ``predictor.adapters.sync_cycle.CycleReport``)."""
        t = self.target
        self.passes.labels(target=t, outcome="ok").inc()
        self.last_success.labels(target=t).set(self.clock())
        self.last_duration.labels(target=t).set(seconds)
        self.jobs.labels(target=t, state="pending").set(report.pending)
        self.jobs.labels(target=t, state="running").set(report.running)
        failed = [a for a in report.applied if not a.ok]
        self.errors.labels(target=t, kind="delivery_retry").inc(sum(a.retryable for a in failed))
        self.errors.labels(target=t, kind="delivery_rejected").inc(sum(not a.retryable for a in failed))
        self.errors.labels(target=t, kind="plan").inc(len(report.errors))

    def pass_failed(self) -> None:
        """Record a pass that could not read the cluster."""
        self.passes.labels(target=self.target, outcome="unavailable").inc()
        self.errors.labels(target=self.target, kind="unavailable").inc()

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)

    def serve(self, bind: str) -> tuple[Any, Any]:
        """Serve ``/metrics`` on ``bind`` (host:port) from a background thread; returns (server, thread)."""
        host, port = parse_bind(bind)
        return start_http_server(port, addr=host, registry=self.registry)
