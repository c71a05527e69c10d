"""Order rules: which pending job goes first, and the integer priority handed to Slurm / Kueue.

One rule per class behind :class:`Ordering`, chosen by ``policy.ordering`` from ``ORDERINGS``:

``multifactor`` (ours)
    weighted sum of the factors in ``policy.weights`` (Slurm multifactor style), ties by submit time.
``fifo``
    submit time.
``sjf``
    predicted p50 run time, shortest first (pass true durations as predictions for SJF-oracle).
``qssf``
    predicted GPU-time (p50 x GPUs x share), smallest first (Helios' QSSF).
``las``
    Tiresias' discretised 2D-LAS: attained service (GPU-seconds, earlier attempts plus the current
    run for running jobs) sorted into queues at ``las.thresholds_gpu_s``; lower queue first, FIFO
    inside a queue. Uses no prediction. Running jobs are re-ranked every cycle, so preemption follows.
``kueue``
    the tier's ``kueue_priority`` (WorkloadPriorityClass), then creation time (Kueue's order).

Rule *starvation guard* (any ordering; ``aging`` section). Job ``j`` *starves* once it has waited
its threshold ``T_j``: ``T_j = aging.starvation_after_s = T_max`` for every job, or, with
``starvation_run_time_factor = k``, ``T_j = clamp(k x p90_j, starvation_min_s, T_max)`` (``p90_j``
the predicted run time; ``T_max`` when unknown); with ``starvation_backlog_factor = b`` also
``T_j = clamp(max(k x p90_j, b x D), starvation_min_s, T_max)``, ``D`` the queue's drain time this
cycle (pending predicted GPU-seconds / the cluster's GPUs, :func:`backlog_drain_s`). Starving jobs are ranked by the time they started
starving, ``e_j = submit_j + T_j`` (then submit time, then row); the first ``aging.guard_depth`` of
them (all when null; jobs that can never run on this cluster are left out) form the *guard band*, ordered above every other job in that rank order. The
others keep their normal priority until a band member leaves the queue. Hence a job in the band is
ordered ahead of every job that starts starving after it, and a job reaches the band once fewer
than ``guard_depth`` jobs that started starving before it are still pending (bound and proof in
docs/rules-layer.md, *The no-starvation bound*).

Integer priorities (``Decision.priority``, Slurm's uint32 scale): an ordering maps its key into
``1 .. 2**31 - 1``, monotone with the order (equal keys may share a value); the guard band uses
``2**31 .. 2**32 - 2`` (``2**31 + (2**31 - 2 - submit second)``). ``Decision.kueue_priority`` is
half of it, within int32. In the band the value falls with ``e_j`` (to the second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from predictor.capacity.layout import MILLI
from predictor.policy.config import ORDERING_NAMES, AgingConfig, PolicyConfig
from predictor.policy.context import CycleContext
from predictor.policy.factors import FACTORS, PriorityFactor
from predictor.policy.factors.base import hours

__all__ = ["Ordering", "OrderKeys", "ORDERINGS", "GUARD_BASE", "NORMAL_MAX", "order_pending",
           "guard_priority", "starvation_threshold_s", "backlog_drain_s"]

#: Highest priority of the normal band; the starvation guard band starts just above.
NORMAL_MAX = 2**31 - 1
GUARD_BASE = 2**31
_GUARD_SPAN = 2**31 - 2
_LOG_TOP = np.log1p(1e9)  # durations / GPU-seconds beyond ~31 years saturate


@dataclass(frozen=True, eq=False)
class OrderKeys:
    """An ordering's verdict on the pending jobs: ``key`` (larger first) and integer ``priority``.

    ``factor_values`` (n_jobs, n_factors) and ``factor_names``/``factor_weights`` are filled by the
    multifactor ordering; other orderings leave them empty.
    """

    key: np.ndarray
    priority: np.ndarray
    factor_names: tuple[str, ...] = ()
    factor_weights: tuple[float, ...] = ()
    factor_values: np.ndarray | None = None


class Ordering(Protocol):
    """An order rule (see the module docstring)."""

    name: ClassVar[str]
    uses_predictions: ClassVar[bool]

    def __init__(self, policy: PolicyConfig) -> None: ...

    def keys(self, ctx: CycleContext) -> OrderKeys: ...

    def running_priority(self, ctx: CycleContext) -> np.ndarray | None:
        """Current priority of the running jobs, or None to use the one they started with."""
        ...

    def explain(self, ctx: CycleContext, i: int) -> str: ...


def _scale(unit: np.ndarray) -> np.ndarray:
    """Map values in [0, 1] to integers 1 .. NORMAL_MAX, monotone."""
    return 1 + np.floor(np.clip(unit, 0.0, 1.0) * (NORMAL_MAX - 1)).astype(np.int64)


def _log_small_first(x: np.ndarray) -> np.ndarray:
    """1 for 0, falling to 0 for huge values, log scale (NaN -> middle)."""
    v = 1.0 - np.log1p(np.maximum(x, 0.0)) / _LOG_TOP
    return np.where(np.isfinite(v), v, 0.5)


def guard_priority(starving_since_ts: np.ndarray) -> np.ndarray:
    """Integer priority of jobs in the starvation guard band: the earlier a job started starving
    (``submit + threshold``), the higher its priority."""
    sec = np.clip(np.floor(starving_since_ts), 0, _GUARD_SPAN).astype(np.int64)
    return GUARD_BASE + (_GUARD_SPAN - sec)


def starvation_threshold_s(ctx: CycleContext, aging: AgingConfig) -> np.ndarray | None:
    """Per pending job, the wait after which it starves (``T_j`` of the module docstring); None
    without a guard."""
    t_max = aging.starvation_after_s
    if t_max is None:
        return None
    n = len(ctx.pending)
    k = aging.starvation_run_time_factor
    if k is None:
        return np.full(n, float(t_max))
    with np.errstate(invalid="ignore", over="ignore"):
        t = k * ctx.p90
        b = aging.starvation_backlog_factor
        if b > 0:
            t = np.fmax(t, b * backlog_drain_s(ctx))
        t = np.clip(t, aging.starvation_min_s, t_max)
    return np.where(np.isfinite(t), t, float(t_max))


def backlog_drain_s(ctx: CycleContext) -> float:
    """The queue's drain time this cycle: predicted GPU-seconds of the pending jobs (those with a
    prediction) over the cluster's GPUs."""
    g = ctx.gpu_seconds
    n = ctx.layout.n_gpus
    return float(np.nansum(g)) / n if n else 0.0


class MultifactorOrdering:
    name: ClassVar[str] = "multifactor"
    uses_predictions: ClassVar[bool] = True

    def __init__(self, policy: PolicyConfig) -> None:
        self.weights = {k: float(w) for k, w in policy.weights.items() if w > 0}
        self.total = float(sum(self.weights.values())) or 1.0
        self.factors: dict[str, PriorityFactor] = {k: FACTORS[k](policy) for k in self.weights}

    def keys(self, ctx: CycleContext) -> OrderKeys:
        n = len(ctx.pending)
        names = tuple(self.factors)
        values = np.empty((n, len(names)))
        for j, name in enumerate(names):
            values[:, j] = self.factors[name].values(ctx)
        weights = np.array([self.weights[k] for k in names])
        score = values @ weights if len(names) else np.zeros(n)
        return OrderKeys(key=score, priority=_scale(score / self.total), factor_names=names,
                         factor_weights=tuple(weights.tolist()), factor_values=values)

    def running_priority(self, ctx: CycleContext) -> np.ndarray | None:
        return None

    def explain(self, ctx: CycleContext, i: int) -> str:
        return "; ".join(f.explain(ctx, i) for f in self.factors.values())


class FifoOrdering:
    name: ClassVar[str] = "fifo"
    uses_predictions: ClassVar[bool] = False

    def __init__(self, policy: PolicyConfig) -> None:
        pass

    def keys(self, ctx: CycleContext) -> OrderKeys:
        submit = ctx.pending.submit_ts
        sec = np.clip(np.floor(submit), 0, NORMAL_MAX - 1)
        return OrderKeys(key=-submit, priority=(NORMAL_MAX - sec).astype(np.int64))

    def running_priority(self, ctx: CycleContext) -> np.ndarray | None:
        return None

    def explain(self, ctx: CycleContext, i: int) -> str:
        return f"first come, first served: submitted {hours(ctx.now - ctx.pending.submit_ts[i])} ago"


class SjfOrdering:
    name: ClassVar[str] = "sjf"
    uses_predictions: ClassVar[bool] = True

    def __init__(self, policy: PolicyConfig) -> None:
        pass

    def keys(self, ctx: CycleContext) -> OrderKeys:
        d = ctx.p50
        return OrderKeys(key=-d, priority=_scale(_log_small_first(d)))

    def running_priority(self, ctx: CycleContext) -> np.ndarray | None:
        return None

    def explain(self, ctx: CycleContext, i: int) -> str:
        return f"shortest job first: predicted run time {hours(ctx.p50[i])}"


class QssfOrdering:
    name: ClassVar[str] = "qssf"
    uses_predictions: ClassVar[bool] = True

    def __init__(self, policy: PolicyConfig) -> None:
        pass

    def keys(self, ctx: CycleContext) -> OrderKeys:
        p = ctx.pending
        g = ctx.p50 * p.num_gpus * (p.gpu_milli / MILLI)
        return OrderKeys(key=-g, priority=_scale(_log_small_first(g)))

    def running_priority(self, ctx: CycleContext) -> np.ndarray | None:
        return None

    def explain(self, ctx: CycleContext, i: int) -> str:
        p = ctx.pending
        g = ctx.p50[i] * p.num_gpus[i] * p.gpu_milli[i] / MILLI
        return f"smallest predicted GPU-time first: {g / 3600:.3g} GPU-h"


class LasOrdering:
    name: ClassVar[str] = "las"
    uses_predictions: ClassVar[bool] = False

    def __init__(self, policy: PolicyConfig) -> None:
        self.thresholds = np.asarray(policy.las.thresholds_gpu_s, dtype=np.float64)
        self.n_queues = len(self.thresholds) + 1
        self.band = (NORMAL_MAX - 1) // self.n_queues

    def _priority(self, attained: np.ndarray, submit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        queue = np.searchsorted(self.thresholds, attained, side="right")
        within = np.clip(np.floor(submit), 0, self.band - 1).astype(np.int64)
        prio = 1 + (self.n_queues - 1 - queue) * self.band + (self.band - 1 - within)
        return queue, prio.astype(np.int64)

    def keys(self, ctx: CycleContext) -> OrderKeys:
        p = ctx.pending
        queue, prio = self._priority(p.attained_gpu_s, p.submit_ts)
        return OrderKeys(key=-queue.astype(np.float64), priority=prio)

    def running_priority(self, ctx: CycleContext) -> np.ndarray | None:
        r = ctx.snapshot.running
        this_run = np.maximum(ctx.now - r.start_ts, 0.0) * r.num_gpus * (r.gpu_milli / MILLI)
        attained = np.where(np.isfinite(r.attained_gpu_s), r.attained_gpu_s, this_run)
        return self._priority(attained, r.submit_ts)[1]

    def explain(self, ctx: CycleContext, i: int) -> str:
        a = float(ctx.pending.attained_gpu_s[i])
        q = int(np.searchsorted(self.thresholds, a, side="right"))
        return f"least attained service: {a / 3600:.3g} GPU-h received, queue {q + 1} of {self.n_queues}"


class KueueOrdering:
    name: ClassVar[str] = "kueue"
    uses_predictions: ClassVar[bool] = False

    def __init__(self, policy: PolicyConfig) -> None:
        self.class_value = np.array([t.kueue_priority for t in policy.tiers.values()], dtype=np.int64)

    def keys(self, ctx: CycleContext) -> OrderKeys:
        value = self.class_value[ctx.tier_index]
        # Decision.kueue_priority == priority // 2 == the class value (clamped to >= 0 for uint32)
        return OrderKeys(key=value.astype(np.float64), priority=np.clip(2 * value + 1, 1, NORMAL_MAX))

    def running_priority(self, ctx: CycleContext) -> np.ndarray | None:
        value = self.class_value[ctx.running_tier_index]
        return np.clip(2 * value + 1, 1, NORMAL_MAX)

    def explain(self, ctx: CycleContext, i: int) -> str:
        tier = ctx.tier_names[ctx.tier_index[i]]
        return f"priority class {tier} ({int(self.class_value[ctx.tier_index[i]])}), then creation time"


#: Ordering name -> class.
ORDERINGS: dict[str, type[Ordering]] = {
    cls.name: cls  # type: ignore[misc]
    for cls in (MultifactorOrdering, FifoOrdering, SjfOrdering, QssfOrdering, LasOrdering, KueueOrdering)
}
if tuple(ORDERINGS) != ORDERING_NAMES:  # pragma: no cover - an ordering added without its name in the schema
    raise ImportError(f"ORDERINGS {tuple(ORDERINGS)} differ from policy.config.ORDERING_NAMES {ORDERING_NAMES}")


def order_pending(ctx: CycleContext, keys: OrderKeys, aging: AgingConfig | float | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply the starvation guard and sort.

    ``aging`` is the policy's ``aging`` section (a number or None stands for
    ``AgingConfig(starvation_after_s=that)``).

    Returns
    -------
    order : ndarray of int64
        Pending rows, first to be considered first.
    priority : ndarray of int64
        Final integer priority per pending row (guard band included).
    guarded : ndarray of bool
        Rows in the starvation guard band.
    """
    if not isinstance(aging, AgingConfig):
        aging = AgingConfig(starvation_after_s=aging)
    p = ctx.pending
    n = len(p)
    rows = np.arange(n)
    threshold = starvation_threshold_s(ctx, aging)
    if threshold is None or n == 0:
        return np.lexsort((rows, p.submit_ts, -keys.key)), keys.priority.astype(np.int64), np.zeros(n, dtype=bool)
    since = p.submit_ts + threshold
    guarded = ctx.now - p.submit_ts >= threshold
    if ctx.sizing is not None:
        guarded &= ctx.sizing.flavor >= 0  # a job that can never run here holds no place in the band
    depth = aging.guard_depth
    if depth is not None and int(guarded.sum()) > depth:
        starving = np.flatnonzero(guarded)
        first = starving[np.lexsort((starving, p.submit_ts[starving], since[starving]))[:depth]]
        guarded = np.zeros(n, dtype=bool)
        guarded[first] = True
    if not guarded.any():
        return np.lexsort((rows, p.submit_ts, -keys.key)), keys.priority.astype(np.int64), guarded
    priority = np.where(guarded, guard_priority(since), keys.priority)
    primary = np.where(guarded, np.inf, keys.key)
    band_rank = np.where(guarded, since, 0.0)
    order = np.lexsort((rows, p.submit_ts, band_rank, -primary))
    return order, priority.astype(np.int64), guarded
