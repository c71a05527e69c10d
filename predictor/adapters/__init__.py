"""Cluster adapters: apply Decisions to Kueue/Kubernetes or Slurm.

The interface and its data types are re-exported here; the adapters themselves live in
``predictor.adapters.slurm.adapter`` and ``predictor.adapters.kueue.adapter`` (imported on use: the Kueue one
loads the Kubernetes client).
"""

from predictor.adapters.base import (
    AppliedAction,
    ClusterAdapter,
    Operation,
    SchedulerError,
    SchedulerRejected,
    SchedulerUnavailable,
)
from predictor.adapters.retry import RetryExhausted, RetryPolicy

__all__ = [
    "AppliedAction",
    "ClusterAdapter",
    "Operation",
    "RetryExhausted",
    "RetryPolicy",
    "SchedulerError",
    "SchedulerRejected",
    "SchedulerUnavailable",
]
