"""What the priority factors and orderings read in one cycle: the snapshot plus derived per-job arrays.

Derived values are computed lazily (only the factors with a weight ask for them) and once per cycle.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from predictor.capacity.book import CapacityBook
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.capacity.sizing import SizingOutcome
from predictor.policy.config import PolicyConfig, SlaClassConfig
from predictor.policy.snapshot import ClusterSnapshot

__all__ = ["CycleContext", "NO_CLASS"]

#: ``best_class_now`` value of a job that has no placement free now.
NO_CLASS = 5


class CycleContext:
    """One cycle's view for factors and orderings.

    Parameters
    ----------
    snapshot : ClusterSnapshot
    policy : PolicyConfig
    sizing : SizingOutcome
        Sizing of the pending jobs (allowed GPU types).
    book : CapacityBook
        The capacity book as the cycle opens (before any start).
    """

    def __init__(self, snapshot: ClusterSnapshot, policy: PolicyConfig, sizing: SizingOutcome,
                 book: CapacityBook) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.sizing = sizing
        self.book = book
        self.now = float(snapshot.now)
        self.pending = snapshot.pending
        self.layout = snapshot.layout
        tables = self.tables = policy_tables(policy)
        self.tier_names: tuple[str, ...] = tables.tier_names
        lookup = tables.tier_lookup(snapshot.tiers)
        # code -1 (no tier) indexes the appended default
        self.tier_index = lookup[self.pending.tier]
        self.running_tier_index = lookup[snapshot.running.tier]

    # ------------------------------------------------------------------ per-tier tables
    @property
    def tier_rank(self) -> np.ndarray:
        return self.tables.tier_rank

    @property
    def tier_sla(self) -> list[SlaClassConfig | None]:
        return self.tables.tier_sla

    # ------------------------------------------------------------------ durations and deadlines
    @cached_property
    def has_prediction(self) -> np.ndarray:
        return np.isfinite(self.pending.p50_s)

    def _fallback_duration(self, q: np.ndarray) -> np.ndarray:
        limit = self.pending.time_limit_s
        fallback = np.where(np.isfinite(limit), limit, self.policy.reservation.unknown_duration_s)
        return np.where(np.isfinite(q), q, fallback)

    @cached_property
    def p50(self) -> np.ndarray:
        """Predicted p50 run time on the best placement; the time limit or a default when unknown."""
        return self._fallback_duration(self.pending.p50_s)

    @cached_property
    def p90(self) -> np.ndarray:
        """Predicted p90 run time on the best placement; the time limit or a default when unknown."""
        return self._fallback_duration(self.pending.p90_s)

    @cached_property
    def deadline(self) -> np.ndarray:
        """The job's deadline, else submit + its tier's SLA turnaround, else NaN."""
        implied = self.pending.submit_ts + self.tables.tier_turnaround[self.tier_index]
        return np.where(np.isfinite(self.pending.deadline_ts), self.pending.deadline_ts, implied)

    @cached_property
    def sla_horizon(self) -> np.ndarray:
        return self.tables.tier_horizon[self.tier_index]

    @cached_property
    def at_risk(self) -> np.ndarray:
        """Rule *SLA at risk*: the deadline is closer than the predicted p90 run time."""
        with np.errstate(invalid="ignore"):
            return np.isfinite(self.deadline) & (self.deadline - self.now < self.p90)

    @cached_property
    def expected_start(self) -> np.ndarray:
        """Earliest time the cluster as a whole has the job's GPU count free (a lower bound).

        From the p90 ends of the running jobs (``book.busy_until``), ignoring GPU types, topology and
        the jobs queued ahead: a quick, optimistic estimate used for SLA slack.
        """
        busy = np.sort(self.book.busy_until)
        g = self.pending.num_gpus
        idx = np.minimum(g, len(busy)) - 1
        t = busy[np.maximum(idx, 0)] if len(busy) else np.full(len(g), np.inf)
        return np.where(g <= len(busy), np.maximum(t, self.now), np.inf)

    @cached_property
    def gpu_seconds(self) -> np.ndarray:
        """Predicted GPU-time: p50 x GPUs x share (NaN when no prediction)."""
        p = self.pending
        return p.p50_s * p.num_gpus * (p.gpu_milli / MILLI)

    # ------------------------------------------------------------------ fair share
    @cached_property
    def team_usage_fraction(self) -> np.ndarray:
        """Each snapshot team's share of all decayed usage (0 when nobody used anything)."""
        usage = np.asarray(self.snapshot.team_usage_gpu_s, dtype=np.float64)
        total_usage = usage.sum()
        return usage / total_usage if total_usage > 0 else np.zeros_like(usage)

    @cached_property
    def team_fairshare(self) -> np.ndarray:
        """Slurm's classic fair-share factor per team code: ``2 ** (-usage_norm / share_norm)``."""
        return np.exp2(-self.team_usage_fraction / self.team_share_fraction)

    @cached_property
    def team_share_fraction(self) -> np.ndarray:
        """Each snapshot team's entitlement as a fraction of all entitlements (configured teams too)."""
        return self.tables.team_share_fraction(self.snapshot.teams)

    @cached_property
    def fairshare(self) -> np.ndarray:
        f = np.append(self.team_fairshare, 1.0)  # code -1 (no team): no usage on record
        return f[self.pending.team]

    # ------------------------------------------------------------------ topology outlook
    @cached_property
    def best_class_now(self) -> np.ndarray:
        """Best placement class free now for each job over its allowed types (NO_CLASS when none).

        From the largest number of wholly free GPUs in one island / NUMA domain / node / rack / the
        cluster per type (ignoring reservations); a GPU share needs one GPU with that share free.
        """
        lay, book = self.layout, self.book
        memo = getattr(book, "gang_memo", None)
        maxima = None if memo is None else memo.recall("free_maxima", book.free_milli)
        if maxima is None:
            maxima = free_maxima(lay, book.free_milli)
            if memo is not None:
                memo.remember("free_maxima", book.free_milli, maxima)
        p = self.pending
        allowed = self.sizing.allowed
        g = p.num_gpus
        feasible = (allowed[:, :, None] & (maxima[None, :, :] >= g[:, None, None])).any(axis=1)  # (n, 5)
        share = p.gpu_milli < MILLI
        if share.any():  # a share job is "nvlink" on one GPU; several shares land anywhere
            rows = share.nonzero()[0]
            enough = np.zeros(len(rows), dtype=bool)
            for t in range(lay.n_types):
                free_t = np.sort(book.free_milli[lay.type_masks[t]])
                count = len(free_t) - np.searchsorted(free_t, p.gpu_milli[rows], side="left")
                enough |= allowed[rows, t] & (count >= g[rows])
            feasible[rows] = False
            feasible[rows, 0] = enough & (g[rows] == 1)
            feasible[rows, 4] = enough & (g[rows] > 1)
        return np.where(feasible.any(axis=1), np.argmax(feasible, axis=1), NO_CLASS)


class PolicyTables:
    """What a cycle derives from the policy alone (and the snapshot's vocabularies), kept across cycles:
    tier names and ranks, the tier lookup of each tier vocabulary, the SLA turnaround and horizon per
    tier, each team vocabulary's share fractions. Each is the value ``CycleContext`` computed per cycle
    before (same expressions); read-only arrays."""

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy
        tiers = list(policy.tiers.values())
        self.tier_names: tuple[str, ...] = tuple(policy.tiers)
        self.default_tier_index = self.tier_names.index(policy.default_tier)
        self.tier_rank = _frozen(np.array([t.rank for t in tiers]))
        self.tier_sla: list[SlaClassConfig | None] = [policy.sla_classes[t.sla_class] if t.sla_class else None
                                                      for t in tiers]
        self.tier_turnaround = _frozen(np.array([(c.turnaround_s if c and c.turnaround_s else np.nan)
                                                 for c in self.tier_sla]))
        default = SlaClassConfig().horizon_s
        self.tier_horizon = _frozen(np.array([(c.horizon_s if c else default) for c in self.tier_sla]))
        self._lookups: dict[tuple[str, ...], np.ndarray] = {}
        self._shares: dict[tuple[str, ...], np.ndarray] = {}

    def tier_lookup(self, tiers: tuple[str, ...]) -> np.ndarray:
        """Tier index of each code of the vocabulary ``tiers``, plus the default tier for code -1."""
        hit = self._lookups.get(tiers)
        if hit is None:
            policy, names = self.policy, self.tier_names
            hit = _frozen(np.array([names.index(policy.tier_of(t)) for t in tiers] + [self.default_tier_index],
                                   dtype=np.int64))
            if len(self._lookups) > 64:
                self._lookups.clear()
            self._lookups[tiers] = hit
        return hit

    def team_share_fraction(self, teams: tuple[str, ...]) -> np.ndarray:
        """Each team's entitlement as a fraction of all entitlements (configured teams too)."""
        hit = self._shares.get(teams)
        if hit is None:
            policy = self.policy
            shares = np.array([policy.share_of(t) for t in teams], dtype=np.float64)
            listed = set(teams)
            total = shares.sum() + sum(cfg.share for name, cfg in policy.teams.items() if name not in listed)
            hit = _frozen(shares / total if total > 0 else np.ones_like(shares))
            if len(self._shares) > 64:
                self._shares.clear()
            self._shares[teams] = hit
        return hit


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


_TABLES: dict[int, PolicyTables] = {}


def policy_tables(policy: PolicyConfig) -> PolicyTables:
    """The :class:`PolicyTables` of ``policy``, built once per policy object (kept by identity, like the
    scheduler's compiled ordering: a policy is not modified once loaded)."""
    hit = _TABLES.get(id(policy))
    if hit is None or hit.policy is not policy:
        if len(_TABLES) > 64:
            _TABLES.clear()
        hit = _TABLES[id(policy)] = PolicyTables(policy)
    return hit


def free_maxima(lay: ClusterLayout, free_milli: np.ndarray) -> np.ndarray:
    """Per GPU type (rows) and placement class (columns), the largest gang of wholly free GPUs that
    fits in one unit of that class (island, NUMA domain, node, rack; the whole type for the last)."""
    whole = free_milli == MILLI
    maxima = np.zeros((lay.n_types, 5), dtype=np.int64)
    for t in range(lay.n_types):
        usable = whole & lay.type_masks[t]
        idx = usable.nonzero()[0]
        if len(idx) == 0:
            continue
        per_node = np.bincount(lay.gpu_node[idx], minlength=lay.n_nodes)
        isl = lay.gpu_island[idx]
        numa = lay.gpu_numa[idx]
        maxima[t, 0] = max(1, np.bincount(isl[isl >= 0]).max() if (isl >= 0).any() else 1)
        maxima[t, 1] = max(maxima[t, 0], np.bincount(numa[numa >= 0]).max() if (numa >= 0).any() else 1)
        maxima[t, 2] = max(maxima[t, 1], per_node.max())
        racked = lay.node_rack >= 0
        rack = np.bincount(lay.node_rack[racked], weights=per_node[racked]).max() if racked.any() else 0
        maxima[t, 3] = max(maxima[t, 2], int(rack))
        maxima[t, 4] = len(idx)
    maxima.flags.writeable = False
    return maxima
