"""Preemption: which running jobs to evict so an urgent job can start, computed, never performed.

Like Kueue, choosing victims (here) is separate from acting on them (adapters, the replay). The
scheduler decides *whether* a blocked job may preempt (``preemption`` section of the policy: scope,
tier rules, trigger) and which running jobs are *candidates*; this module picks among them.

Rule *victim choice*: among the candidates (every one has a lower priority than the preemptor, has
run at least ``min_runtime_s``, and is allowed by the scope rules), choose a set whose GPUs, together
with what is free, hold the preemptor's gang (respecting reservations: the preemptor must end before
any reservation on a GPU it takes), minimising first the work lost and then the number of victims:

1. *one node*: for every node, evict its candidates cheapest first until the gang fits there;
2. *anywhere*: evict candidates cheapest first (cheapest = least work lost, then most GPUs freed)
   until the gang fits, then drop every victim the placement does not need, costliest first;

and keep the cheaper of the two (fewer victims on a tie). The cost of a victim is rule *preemption
cost* in GPU-seconds (``preemption_cost_s`` x GPUs x share).

Rule *work lost*, by the job's checkpoint kind (``RunningJobs.checkpoint_kind``; docs/rules-layer.md,
*Checkpoint kinds*):

* ``application`` or unknown: ``now - last_checkpoint`` when the job reported one; else
  ``(now - start) mod interval`` with its own checkpoint interval (checkpoints counted from its
  start); else, with ``preemption.assumed_checkpoint_interval_s``, the expected loss over an unknown
  phase, ``min(ran, interval / 2)``; else everything since it started;
* ``system`` (a CRIU / cuda-checkpoint snapshot taken at the eviction): nothing;
* ``none``: everything since it started.

Rule *preemption cost*: work lost plus the time to write the checkpoint at the eviction (a system
snapshot: ``size / preemption.checkpoint_bandwidth_gb_s``; an application checkpoint was written
already) plus the time to restore it when the job restarts (``size / bandwidth`` for both kinds);
an unknown size costs no time. Rule *snapshot grace*: an eviction's grace period is at least the
longest snapshot write of its victims (``eviction_grace_s``), so the snapshot is complete before
the kill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictor.capacity.book import CapacityBook
from predictor.capacity.layout import CROSS_NUMA, CROSS_RACK
from predictor.capacity.placement import GangChoice
from predictor.policy.config import PolicyConfig
from predictor.policy.snapshot import CHECKPOINT_KIND_CODES, RunningJobs

__all__ = ["VictimChoice", "work_lost_s", "checkpoint_write_s", "checkpoint_restore_s", "preemption_cost_s",
           "eviction_grace_s", "choose_victims", "milli_of"]

_SYSTEM, _NONE = CHECKPOINT_KIND_CODES["system"], CHECKPOINT_KIND_CODES["none"]


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """Victims (running rows), where the preemptor goes, and the GPU-seconds of work thrown away."""

    rows: np.ndarray
    placement: GangChoice
    work_lost_gpu_s: float


def tier_preemption(policy: PolicyConfig) -> np.ndarray:
    """Rule *tier rules*: ``[a, b]`` says a job of tier ``a`` may preempt a running job of tier ``b``
    (``policy.tiers``' order; each tier's ``can_preempt``). Read under ``preemption.scope:
    tier_rules``; the other scopes choose candidates by priority and team instead."""
    names = list(policy.tiers)
    may = np.zeros((len(names), len(names)), dtype=bool)
    for a, tier in enumerate(policy.tiers.values()):
        for other in tier.can_preempt:
            may[a, names.index(other)] = True
    return may


def work_lost_s(running: RunningJobs, now: float, assumed_interval_s: float | None) -> np.ndarray:
    """Rule *work lost*: seconds of progress each running job loses if evicted now (module docstring)."""
    ran = np.maximum(now - running.start_ts, 0.0)
    interval = running.checkpoint_interval_s
    with np.errstate(invalid="ignore", divide="ignore"):
        by_interval = np.where(np.isfinite(interval) & (interval > 0), np.mod(ran, interval), ran)
    if assumed_interval_s is not None:  # phase unknown: the expected loss
        by_interval = np.where(np.isfinite(interval), by_interval, np.minimum(ran, assumed_interval_s / 2.0))
    since_ckpt = now - np.maximum(running.last_checkpoint_ts, running.start_ts)
    lost = np.where(np.isfinite(running.last_checkpoint_ts), np.clip(since_ckpt, 0.0, ran), by_interval)
    kind = running.checkpoint_kind
    return np.where(kind == _SYSTEM, 0.0, np.where(kind == _NONE, ran, lost))


def checkpoint_write_s(running: RunningJobs, bandwidth_gb_s: float) -> np.ndarray:
    """Seconds to write each job's checkpoint at an eviction (system snapshots; 0 otherwise or unknown)."""
    size = np.nan_to_num(running.checkpoint_size_gb, nan=0.0)
    return np.where(running.checkpoint_kind == _SYSTEM, size / bandwidth_gb_s, 0.0)


def checkpoint_restore_s(running: RunningJobs, bandwidth_gb_s: float) -> np.ndarray:
    """Seconds to restore each job's checkpoint when it restarts (0 for none, unknown kind or size)."""
    size = np.nan_to_num(running.checkpoint_size_gb, nan=0.0)
    return np.where((running.checkpoint_kind >= 0) & (running.checkpoint_kind != _NONE), size / bandwidth_gb_s, 0.0)


def preemption_cost_s(running: RunningJobs, now: float, assumed_interval_s: float | None,
                      bandwidth_gb_s: float) -> np.ndarray:
    """Rule *preemption cost*: seconds of GPU time each job's eviction costs (lost + write + restore)."""
    return (work_lost_s(running, now, assumed_interval_s) + checkpoint_write_s(running, bandwidth_gb_s)
            + checkpoint_restore_s(running, bandwidth_gb_s))


def eviction_grace_s(running: RunningJobs, rows: np.ndarray, grace_s: float, bandwidth_gb_s: float) -> float:
    """Rule *snapshot grace*: the policy's grace, or the longest snapshot write of the victims ``rows``."""
    if len(rows) == 0:
        return float(grace_s)
    write = checkpoint_write_s(running, bandwidth_gb_s)[np.asarray(rows, dtype=np.int64)]
    return float(max(grace_s, float(np.ceil(write.max()))))


def _extra(n_gpus: int, gpus: np.ndarray, milli: np.ndarray) -> np.ndarray:
    extra = np.zeros(n_gpus, dtype=np.int64)
    np.add.at(extra, gpus, milli)
    return extra


def choose_victims(book: CapacityBook, running: RunningJobs, candidates: np.ndarray, lost_gpu_s: np.ndarray,
                   *, type_code: int, num_gpus: int, milli: int, end_by_class: Sequence[float],
                   max_class: int = CROSS_RACK) -> VictimChoice | None:
    """Pick victims among ``candidates`` (bool per running row) for a gang; None when impossible.

    Parameters
    ----------
    book : CapacityBook
        The cycle's capacity (free shares, reservations).
    running : RunningJobs
    candidates : ndarray of bool, shape (n_running,)
    lost_gpu_s : ndarray of float, shape (n_running,)
        GPU-seconds each running job would lose.
    type_code, num_gpus, milli : int
        The preemptor's GPU type, gang size and share.
    end_by_class : sequence of 5 floats
        The preemptor's predicted end per placement class if it starts after the grace period.

    Cost: O(n_gpus + entries) to rank, plus one O(n_gpus) placement check per victim kept.
    """
    lay = book.layout
    g = int(num_gpus)
    entry_job = running.alloc_job
    # the preemptor's type, and (rule *node eligibility*) only GPUs its constraint allows
    sel = candidates[entry_job] & book.type_mask(type_code)[running.alloc_gpus]
    if not sel.any():
        return None
    e_job, e_gpu = entry_job[sel], running.alloc_gpus[sel]
    e_milli = running.gpu_milli[e_job]

    def place(extra: np.ndarray) -> GangChoice | None:
        return book.place_now(type_code, g, milli, end_by_class, max_class=max_class, extra_free=extra)

    everything = _extra(lay.n_gpus, e_gpu, e_milli)
    if place(everything) is None:
        return None
    cand_rows = np.unique(e_job)
    cost_order = cand_rows[np.lexsort((-running.num_gpus[cand_rows], lost_gpu_s[cand_rows]))]
    rank = np.full(len(running), len(running), dtype=np.int64)
    rank[cost_order] = np.arange(len(cost_order))
    by_job = np.argsort(rank[e_job], kind="stable")  # entries grouped by job, cheapest job first
    bounds = np.searchsorted(rank[e_job][by_job], np.arange(len(cost_order) + 1))
    base_ok = book.type_mask(type_code).copy()
    if book.any_reserved:
        base_ok &= book.reserved_from >= end_by_class[0]
    free = book.free_milli
    options: list[np.ndarray] = []

    # 1. one node: per node, its cheapest candidates until the node holds the gang
    if g <= int(lay.node_gpus.max(initial=0)) and max_class >= CROSS_NUMA:
        ok_free = np.bincount(lay.gpu_node[base_ok & (free >= milli)], minlength=lay.n_nodes)
        e_node = lay.gpu_node[e_gpu]
        key = np.unique(e_node * (len(running) + 1) + e_job)
        p_node, p_row = key // (len(running) + 1), key % (len(running) + 1)
        p_cnt = np.bincount(np.searchsorted(key, e_node * (len(running) + 1) + e_job), minlength=len(key))
        need = g - ok_free[p_node]
        keep = (need > 0) & (lay.node_gpus[p_node] >= g)
        p_node, p_row, p_cnt, need = p_node[keep], p_row[keep], p_cnt[keep], need[keep]
        if len(p_node):
            o = np.lexsort((rank[p_row], p_node))
            p_node, p_row, p_cnt, need = p_node[o], p_row[o], p_cnt[o], need[o]
            first = np.flatnonzero(np.r_[True, p_node[1:] != p_node[:-1]])
            group = np.repeat(np.arange(len(first)), np.diff(np.r_[first, len(p_node)]))
            cum = np.cumsum(p_cnt)
            cum -= np.r_[0, cum[first[1:] - 1]][group]
            cost = np.cumsum(lost_gpu_s[p_row])
            cost -= np.r_[0.0, cost[first[1:] - 1]][group]
            done = np.flatnonzero(cum >= need)
            if len(done):
                _, at = np.unique(group[done], return_index=True)
                ends = done[at]  # first position in each node group where the node holds the gang
                pos_in_group = ends - first[group[ends]]
                best = ends[np.lexsort((pos_in_group, cost[ends]))[0]]
                options.append(p_row[first[group[best]]:best + 1].copy())

    # 2. anywhere: cheapest first until the gang fits, then drop what the placement does not need
    extra = np.zeros(lay.n_gpus, dtype=np.int64)
    count = int((base_ok & (free >= milli)).sum())
    chosen: list[int] = []
    for k, r in enumerate(cost_order.tolist()):
        idx = by_job[bounds[k]:bounds[k + 1]]
        gp = e_gpu[idx]
        before = int((base_ok[gp] & (free[gp] + extra[gp] >= milli)).sum())
        extra[gp] += e_milli[idx]
        count += int((base_ok[gp] & (free[gp] + extra[gp] >= milli)).sum()) - before
        chosen.append(r)
        if count >= g and place(extra) is not None:
            break
    for r in sorted(chosen, key=lambda x: -lost_gpu_s[x]):
        k = int(rank[r])
        idx = by_job[bounds[k]:bounds[k + 1]]
        extra[e_gpu[idx]] -= e_milli[idx]
        if len(chosen) > 1 and place(extra) is not None:
            chosen.remove(r)
        else:
            extra[e_gpu[idx]] += e_milli[idx]
    options.append(np.array(chosen, dtype=np.int64))

    def extra_of(rows: np.ndarray) -> np.ndarray:
        keep = np.isin(e_job, rows)
        return _extra(lay.n_gpus, e_gpu[keep], e_milli[keep])

    for rows in sorted(options, key=lambda rows: (float(lost_gpu_s[rows].sum()), len(rows))):
        choice = place(extra_of(rows))
        if choice is None:
            continue
        needed = np.unique(e_job[np.isin(e_gpu, choice.gpus) & np.isin(e_job, rows)])
        if len(needed) < len(rows):
            again = place(extra_of(needed))
            if again is not None:
                rows, choice = needed, again
        return VictimChoice(rows=rows, placement=choice, work_lost_gpu_s=float(lost_gpu_s[rows].sum()))
    return None


def milli_of(running: RunningJobs, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GPU indices and shares held by running ``rows`` (for returning them to a capacity book)."""
    gpus = [running.gpus_of(int(r)) for r in rows]
    flat = np.concatenate(gpus) if gpus else np.zeros(0, dtype=np.int64)
    milli = np.concatenate([np.full(len(g), running.gpu_milli[r]) for g, r in zip(gpus, rows, strict=True)]) \
        if gpus else np.zeros(0, dtype=np.int64)
    return flat, milli.astype(np.int64) if len(milli) else np.zeros(0, dtype=np.int64)

