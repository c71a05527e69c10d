"""Building snapshots from records: fluent job builders and ``SnapshotBuilder``.

For tests, examples and callers that hold a few hundred jobs as records (the service), in the style
of Kueue's test builders::

    snap = (SnapshotBuilder(homogeneous_inventory(16))
            .running(make_running("r1").gpus(8).on("node-0000").started(0).ends(7200).tier("research"))
            .pending(make_job("a").gpus(8).tier("sla").submitted(100).predict(3600).deadline(9000))
            .build(now=600))

A replay that holds its whole trace in arrays builds ``PendingJobs``/``RunningJobs`` directly with
``from_columns`` (see ``predictor.policy.snapshot``); both paths end in the same ``ClusterSnapshot``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from features.constraints import normalise_constraints
from features.errors import InputError
from features.schema import PLACEMENT_CLASSES
from predictor.capacity.inventory import Inventory
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.capacity.placement import find_gang
from predictor.policy.snapshot import ClusterSnapshot, PendingJobs, RunningJobs

__all__ = ["JobSpec", "RunningSpec", "make_job", "make_running", "SnapshotBuilder", "snapshot_from_jobs"]


class JobSpec:
    """A pending job, built fluently: ``make_job("a").gpus(8).tier("sla").predict(3600)``."""

    def __init__(self, job_id: str) -> None:
        self.job_id = str(job_id)
        self.num_gpus, self.gpu_milli = 1, MILLI
        self.team_name: str | None = None
        self.tier_name: str | None = None
        self.queue_name: str | None = None
        self.submit_ts, self.deadline_ts, self.limit_s = 0.0, np.nan, np.nan
        self.p10, self.p50, self.p90 = np.nan, np.nan, np.nan
        self.peak_upper = self.peak_point = np.nan
        self.slow = [1.0] * len(PLACEMENT_CLASSES)
        self.type_names: tuple[str, ...] = ()
        self.attained_s = 0.0
        self.is_fallback = False
        self.version = "test"
        self.constraint_text: str | None = None

    def gpus(self, n: int, milli: int = MILLI) -> JobSpec:
        self.num_gpus, self.gpu_milli = int(n), int(milli)
        return self

    def share(self, milli: int) -> JobSpec:
        self.num_gpus, self.gpu_milli = 1, int(milli)
        return self

    def team(self, name: str) -> JobSpec:
        self.team_name = name
        return self

    def tier(self, name: str) -> JobSpec:
        self.tier_name = name
        return self

    def queue(self, name: str) -> JobSpec:
        self.queue_name = name
        return self

    def submitted(self, ts: float) -> JobSpec:
        self.submit_ts = float(ts)
        return self

    def deadline(self, ts: float) -> JobSpec:
        self.deadline_ts = float(ts)
        return self

    def time_limit(self, seconds: float) -> JobSpec:
        self.limit_s = float(seconds)
        return self

    def predict(self, p50: float, p90: float | None = None, p10: float | None = None) -> JobSpec:
        self.p50 = float(p50)
        self.p90 = float(p50 if p90 is None else p90)
        self.p10 = float(p50 if p10 is None else p10)
        return self

    def memory(self, upper_mib: float, point_mib: float | None = None) -> JobSpec:
        """Predicted peak memory per GPU: the upper bound, and the point estimate where given."""
        self.peak_upper = float(upper_mib)
        self.peak_point = np.nan if point_mib is None else float(point_mib)
        return self

    def slowdown(self, by_class: Mapping[str, float] | Iterable[float]) -> JobSpec:
        if isinstance(by_class, Mapping):
            self.slow = [float(by_class.get(c, 1.0)) for c in PLACEMENT_CLASSES]
        else:
            self.slow = [float(x) for x in by_class]
        return self

    def types(self, *names: str) -> JobSpec:
        self.type_names = tuple(names)
        return self

    def attained(self, gpu_s: float) -> JobSpec:
        self.attained_s = float(gpu_s)
        return self

    def constraint(self, text: str | None) -> JobSpec:
        """Where it may run (``features.constraints`` text, e.g. ``region=eu-west;label=sensitive``)."""
        self.constraint_text = normalise_constraints(text)
        return self

    def fallback(self) -> JobSpec:
        self.is_fallback = True
        self.version = "fallback"
        return self


class RunningSpec:
    """A running job: ``make_running("r").gpus(4).on("node-0001", [0, 1, 2, 3]).started(0).ends(3600)``."""

    def __init__(self, job_id: str) -> None:
        self.job_id = str(job_id)
        self.num_gpus, self.gpu_milli = 1, MILLI
        self.where: list[tuple[str, tuple[int, ...] | None]] = []
        self.team_name: str | None = None
        self.tier_name: str | None = None
        self.queue_name: str | None = None
        self.start, self.end, self.submit = 0.0, np.nan, np.nan
        self.ckpt_ts, self.ckpt_every = np.nan, np.nan
        self.prio = 0
        self.attained_s = np.nan
        self.type_names: tuple[str, ...] = ()
        self.ckpt_kind: str | None = None
        self.ckpt_size_gb = np.nan

    def gpus(self, n: int, milli: int = MILLI) -> RunningSpec:
        self.num_gpus, self.gpu_milli = int(n), int(milli)
        return self

    def share(self, milli: int) -> RunningSpec:
        self.num_gpus, self.gpu_milli = 1, int(milli)
        return self

    def types(self, *names: str) -> RunningSpec:
        """GPU types it may have been placed on (when ``on`` is not given)."""
        self.type_names = tuple(names)
        return self

    def on(self, node: str, gpus: Iterable[int] | None = None) -> RunningSpec:
        """Place on ``node`` (all of the job's GPUs there unless more ``on`` calls follow)."""
        self.where.append((node, None if gpus is None else tuple(int(g) for g in gpus)))
        return self

    def team(self, name: str) -> RunningSpec:
        self.team_name = name
        return self

    def tier(self, name: str) -> RunningSpec:
        self.tier_name = name
        return self

    def queue(self, name: str) -> RunningSpec:
        self.queue_name = name
        return self

    def started(self, ts: float) -> RunningSpec:
        self.start = float(ts)
        return self

    def submitted(self, ts: float) -> RunningSpec:
        self.submit = float(ts)
        return self

    def ends(self, predicted_end_ts: float) -> RunningSpec:
        self.end = float(predicted_end_ts)
        return self

    def checkpointed(self, ts: float) -> RunningSpec:
        self.ckpt_ts = float(ts)
        return self

    def checkpoint_every(self, seconds: float) -> RunningSpec:
        self.ckpt_every = float(seconds)
        return self

    def checkpoint(self, kind: str, size_gb: float | None = None) -> RunningSpec:
        """How it checkpoints (``application``, ``system``, ``none``) and the checkpoint's size."""
        self.ckpt_kind = kind
        self.ckpt_size_gb = np.nan if size_gb is None else float(size_gb)
        return self

    def priority(self, value: int) -> RunningSpec:
        self.prio = int(value)
        return self

    def attained(self, gpu_s: float) -> RunningSpec:
        """Service received up to now, this run included (default: this run only)."""
        self.attained_s = float(gpu_s)
        return self


def make_job(job_id: str) -> JobSpec:
    """A pending-job builder: one whole GPU, submitted at 0, no prediction, until told otherwise."""
    return JobSpec(job_id)


def make_running(job_id: str) -> RunningSpec:
    """A running-job builder: one whole GPU placed best-class at build time, started at 0."""
    return RunningSpec(job_id)


class _Vocab:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.codes: dict[str, int] = {}

    def code(self, name: str | None) -> int:
        if name is None:
            return -1
        if name not in self.codes:
            self.codes[name] = len(self.names)
            self.names.append(name)
        return self.codes[name]


class SnapshotBuilder:
    """Collects job specs and builds a validated :class:`ClusterSnapshot`."""

    def __init__(self, cluster: Inventory | ClusterLayout) -> None:
        self.layout = cluster if isinstance(cluster, ClusterLayout) else ClusterLayout.of(cluster)
        self._pending: list[JobSpec] = []
        self._running: list[RunningSpec] = []
        self._usage: dict[str, float] = {}

    def pending(self, *jobs: JobSpec) -> SnapshotBuilder:
        self._pending.extend(jobs)
        return self

    def running(self, *jobs: RunningSpec) -> SnapshotBuilder:
        self._running.extend(jobs)
        return self

    def usage(self, gpu_s_by_team: Mapping[str, float]) -> SnapshotBuilder:
        """Decayed GPU-second usage per team (e.g. ``FairShareLedger.usage_at(now)``)."""
        self._usage.update({str(k): float(v) for k, v in gpu_s_by_team.items()})
        return self

    def _allocate(self, spec: RunningSpec, free: np.ndarray) -> np.ndarray:
        lay = self.layout
        if spec.where:
            gpus: list[int] = []
            for node, local in spec.where:
                if node not in lay.node_index:
                    raise InputError(f"running job {spec.job_id}: unknown node {node!r}")
                n = lay.node_index[node]
                if local is None:
                    have = np.flatnonzero(free[lay.node_first_gpu[n]:lay.node_first_gpu[n] + lay.node_gpus[n]]
                                          >= spec.gpu_milli)
                    local = tuple(have[:spec.num_gpus - len(gpus)].tolist())
                gpus.extend(lay.gpu_index(node, g) for g in local)
            chosen = np.array(gpus, dtype=np.int64)
        else:
            usable = free >= spec.gpu_milli
            choice = None
            kinds = [lay.type_index(t) for t in spec.type_names if lay.type_index(t) >= 0] or range(lay.n_types)
            for t in kinds:
                choice = find_gang(lay, usable & lay.type_masks[t], spec.num_gpus,
                                   free_milli=free if spec.gpu_milli < MILLI else None)
                if choice is not None:
                    break
            if choice is None:
                raise InputError(f"running job {spec.job_id}: no room for {spec.num_gpus} GPU(s) in the inventory")
            chosen = choice.gpus
        if len(chosen) != spec.num_gpus:
            raise InputError(f"running job {spec.job_id}: placed on {len(chosen)} GPUs, needs {spec.num_gpus}")
        if (free[chosen] < spec.gpu_milli).any():
            raise InputError(f"running job {spec.job_id}: its GPUs are already taken")
        free[chosen] -= spec.gpu_milli
        return chosen

    def build(self, now: float) -> ClusterSnapshot:
        """The snapshot at ``now`` (validated; InputError on an inconsistent set of jobs)."""
        lay = self.layout
        teams, tiers, queues = _Vocab(), _Vocab(), _Vocab()
        for spec in [*self._pending, *self._running]:
            teams.code(spec.team_name)
        for name in self._usage:
            teams.code(name)
        p = self._pending
        req = None
        if any(s.type_names for s in p):
            req = np.ones((len(p), lay.n_types), dtype=bool)
            for i, s in enumerate(p):
                if s.type_names:
                    req[i] = [t in s.type_names for t in lay.gpu_types]
        pending = PendingJobs.from_columns(
            job_id=[s.job_id for s in p], submit_ts=[s.submit_ts for s in p],
            num_gpus=[s.num_gpus for s in p], gpu_milli=[s.gpu_milli for s in p],
            team=[teams.code(s.team_name) for s in p], tier=[tiers.code(s.tier_name) for s in p],
            queue=[queues.code(s.queue_name) for s in p], deadline_ts=[s.deadline_ts for s in p],
            time_limit_s=[s.limit_s for s in p], p10_s=[s.p10 for s in p], p50_s=[s.p50 for s in p],
            p90_s=[s.p90 for s in p], peak_vram_upper_mib=[s.peak_upper for s in p],
            slowdown=np.array([s.slow for s in p], dtype=np.float64).reshape(len(p), len(PLACEMENT_CLASSES)),
            attained_gpu_s=[s.attained_s for s in p], fallback=[s.is_fallback for s in p],
            model_version=[s.version for s in p], requested_types=req,
            gpu_request=None if req is None else ["|".join(s.type_names) or None for s in p],
            constraint=[s.constraint_text for s in p] if any(s.constraint_text for s in p) else None,
            peak_vram_mib=[s.peak_point for s in p] if any(np.isfinite(s.peak_point) for s in p) else None,
        )
        free = np.full(lay.n_gpus, MILLI, dtype=np.int64)
        r = self._running
        allocs = [self._allocate(s, free) for s in r]
        running = RunningJobs.from_columns(
            job_id=[s.job_id for s in r], gpus=allocs, start_ts=[s.start for s in r],
            gpu_milli=[s.gpu_milli for s in r], team=[teams.code(s.team_name) for s in r],
            tier=[tiers.code(s.tier_name) for s in r], queue=[queues.code(s.queue_name) for s in r],
            predicted_end_ts=[s.end for s in r], last_checkpoint_ts=[s.ckpt_ts for s in r],
            checkpoint_interval_s=[s.ckpt_every for s in r], priority=[s.prio for s in r],
            attained_gpu_s=[s.attained_s for s in r], submit_ts=[s.submit for s in r],
            checkpoint_kind=[s.ckpt_kind for s in r], checkpoint_size_gb=[s.ckpt_size_gb for s in r],
        )
        usage = np.array([self._usage.get(t, 0.0) for t in teams.names], dtype=np.float64)
        snap = ClusterSnapshot(now=float(now), layout=lay, pending=pending, running=running,
                               teams=tuple(teams.names), tiers=tuple(tiers.names), queues=tuple(queues.names),
                               team_usage_gpu_s=usage)
        try:
            return snap.validate()
        except ValueError as exc:
            raise InputError(str(exc)) from None


def _num(v: object) -> float:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return np.nan
    return f


def snapshot_from_jobs(jobs: pd.DataFrame, cluster: Inventory | ClusterLayout, now: float, *,
                       predictions: pd.DataFrame | None = None,
                       usage: Mapping[str, float] | None = None) -> ClusterSnapshot:
    """A snapshot from a canonical job table: ``PENDING`` rows queue, ``RUNNING`` rows hold GPUs.

    Running jobs are placed best-class on the inventory in start order (a job table does not say
    which GPUs a job holds). Predictions (``PREDICTION_COLUMNS``, matched on ``job_id``) fill the
    duration, memory and slowdown of pending jobs and the predicted end of running ones.
    """
    pred = {} if predictions is None else {str(r["job_id"]): r for r in predictions.to_dict("records")}
    b = SnapshotBuilder(cluster)
    state = jobs["state"].astype(str) if "state" in jobs.columns else pd.Series("PENDING", index=jobs.index)
    for row in jobs.loc[state.isin(["PENDING", "RUNNING"])].sort_values("submit_ts").to_dict("records"):
        jid = str(row["job_id"])
        pr = pred.get(jid, {})
        num = _num(row.get("num_gpus"))
        if not np.isfinite(num) or num < 1:
            raise InputError(f"job {jid}: num_gpus must be at least 1 to schedule it (got {row.get('num_gpus')})")
        milli = _num(row.get("gpu_milli"))
        milli = int(milli) if np.isfinite(milli) else MILLI
        team = row.get("team") if isinstance(row.get("team"), str) else None
        tier = row.get("tier") if isinstance(row.get("tier"), str) else None
        queue = row.get("queue") if isinstance(row.get("queue"), str) and row.get("queue") else None
        p50, p90 = _num(pr.get("duration_p50_s")), _num(pr.get("duration_p90_s"))
        if row["state"] == "RUNNING":
            start = _num(row.get("start_ts"))
            spec = make_running(jid).gpus(int(num), milli).started(start if np.isfinite(start) else now)
            if team:
                spec.team(team)
            if tier:
                spec.tier(tier)
            if queue:
                spec.queue(queue)
            if np.isfinite(p90):
                spec.ends(spec.start + p90)
            gpu_type = row.get("gpu_type")
            if isinstance(gpu_type, str) and gpu_type:
                spec.types(*[t for t in gpu_type.replace("|", ",").split(",") if t])
            ckpt = _num(row.get("checkpoint_interval_s"))
            if np.isfinite(ckpt):
                spec.checkpoint_every(ckpt)
            b.running(spec)
            continue
        spec = make_job(jid).gpus(int(num), milli).submitted(_num(row["submit_ts"]))
        if team:
            spec.team(team)
        if tier:
            spec.tier(tier)
        if queue:
            spec.queue(queue)
        if np.isfinite(p50):
            spec.predict(p50, p90 if np.isfinite(p90) else p50, _num(pr.get("duration_p10_s")))
        spec.memory(_num(pr.get("peak_vram_upper_mib")))
        spec.slowdown([_num(pr.get(f"slowdown_{c}", 1.0)) for c in PLACEMENT_CLASSES])
        for key, setter in (("deadline_ts", spec.deadline), ("time_limit_s", spec.time_limit)):
            v = _num(row.get(key))
            if np.isfinite(v):
                setter(v)
        gpu_type = row.get("gpu_type")
        if isinstance(gpu_type, str) and gpu_type:
            spec.types(*[t for t in gpu_type.replace("|", ",").split(",") if t])
        if pr.get("fallback"):
            spec.fallback()
        b.pending(spec)
    if usage:
        b.usage(usage)
    return b.build(now)
