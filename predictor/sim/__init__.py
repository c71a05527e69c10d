"""Trace replay: an event-driven simulator that drives the same rules layer as production.

The simulator has no scheduling rule of its own: every order, placement, reservation and eviction
comes from ``predictor.policy.decide``; the replay carries plans out and measures what happens.

Modules (one concept each): ``events`` (the heap that owns time), ``cluster`` (who holds which
share of which GPU), ``progress`` (work left, eviction and out-of-memory losses), ``workload`` (the
job table as arrays, with its ground truth), ``predictions`` / ``trained`` (what a policy is told),
``rules`` (snapshots in, plans out), ``replay`` (the loop), ``record`` / ``metrics`` / ``report``
(outcomes, the metric set, report.json + report.html), ``experiment`` (split, predict, replay every
policy), ``pai_shape`` (the PAI-simulator validation workload).
"""

from predictor.sim.metrics import METRIC_KEYS, MetricsConfig, policy_metrics
from predictor.sim.replay import Replay, SimConfig, replay
from predictor.sim.workload import JobTable, load_workload

__all__ = ["METRIC_KEYS", "MetricsConfig", "policy_metrics", "Replay", "SimConfig", "replay", "JobTable",
           "load_workload"]
