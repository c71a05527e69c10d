"""A policy comparison: split the history, predict, replay every policy, collect the records.

The split (documented once here)
--------------------------------
Jobs are ordered by submit time. The first ``train_fraction`` of them (default 30 %) are the
*training prefix*; the replay starts at the submit time of the first job after it (``split_ts``)
and replays every job submitted from then on, under every policy alike. A trained predictor is fit
only on prefix jobs that had **ended** before ``split_ts`` (``models`` code, plain Python), and
each replayed job is predicted from the history of jobs that ended before its own submit time
(point-in-time features): nothing from the future. With ``retrain_every_s`` the model is refit, at
the start of each such period of the replay, on every job that had ended by then.

The replay starts from an empty cluster at ``split_ts``: jobs of the prefix still running then are
not replayed (their GPUs are free from the start), which favours no policy over another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from features.errors import InputError
from predictor.capacity.inventory import Inventory
from predictor.policy.config import PolicyConfig
from predictor.sim.metrics import MetricsConfig
from predictor.sim.predictions import NoPredictions, OraclePredictions, PredictionSource, PredictionTable
from predictor.sim.record import ReplayRecord
from predictor.sim.replay import SimConfig, replay
from predictor.sim.workload import JobTable, load_workload, requests_on_inventory

__all__ = ["PolicySpec", "POLICIES", "ExperimentConfig", "Split", "split_history", "run_experiment", "ReplayMany",
           "replay_each"]


@dataclass(frozen=True)
class PolicySpec:
    """A policy of the comparison: the rules-layer preset it runs and what it is told about jobs."""

    name: str
    preset: str
    predictions: str  # "none", "oracle" or "trained"
    summary: str


POLICIES: dict[str, PolicySpec] = {
    s.name: s
    for s in (
        PolicySpec("fifo", "fifo", "none", "first come, first served, strict: the head blocks the queue (no backfill)"),
        PolicySpec("sjf-oracle", "sjf-oracle", "oracle", "shortest job first on the TRUE durations (the limit)"),
        PolicySpec("qssf", "qssf", "trained", "Helios QSSF: smallest predicted GPU-time first"),
        PolicySpec("qssf-sized", "qssf-sized", "trained",
                   "QSSF with the GPU flavor sized from predicted memory, as ours sizes it"),
        PolicySpec("las", "las", "none", "Tiresias discretised 2D-LAS on attained service, with preemption"),
        PolicySpec("kueue", "kueue", "none", "Kueue-like status quo: priority classes, quotas, cohort borrowing"),
        PolicySpec("ours", "ours", "trained", "the full rules layer with trained predictions"),
        PolicySpec("ours-oracle", "ours", "oracle", "the full rules layer with TRUE durations/memory (oracle)"),
    )
}


#: Replays ``(name, policy, predictions)`` runs of one workload on one inventory and returns their
#: records in the order given (``run_experiment``'s ``replay_many``).
ReplayMany = Callable[[JobTable, Inventory, Sequence[tuple[str, PolicyConfig, PredictionTable]], SimConfig],
                      Sequence[ReplayRecord]]


def replay_each(table: JobTable, inventory: Inventory, runs: Sequence[tuple[str, PolicyConfig, PredictionTable]],
                sim: SimConfig, *, on_phase: Callable[[str], None] | None = None) -> list[ReplayRecord]:
    """The default :data:`ReplayMany`: each run in turn, in this process."""
    from predictor.sim.rules import PolicyRules

    say = on_phase or (lambda _msg: None)
    records = []
    for name, policy, pred in runs:
        say(f"replaying {len(table):,} job{'s' if len(table) != 1 else ''} under {name}")
        records.append(replay(table, inventory, PolicyRules(name, policy, table, inventory, pred), pred, sim))
    return records


@dataclass(frozen=True)
class ExperimentConfig:
    """How to split, predict and replay."""

    train_fraction: float = 0.3
    retrain_every_s: float | None = None
    sim: SimConfig = field(default_factory=SimConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def __post_init__(self) -> None:
        if not 0.0 <= self.train_fraction < 1.0:
            raise InputError(f"train fraction must be in [0, 1), got {self.train_fraction}")
        if self.retrain_every_s is not None and self.retrain_every_s <= 0:
            raise InputError(f"retrain period must be positive, got {self.retrain_every_s}")


@dataclass(frozen=True)
class Split:
    """The training prefix and the replayed suffix of a history."""

    history: pd.DataFrame  # every job, sorted by submit time (the point-in-time history source)
    train: pd.DataFrame  # prefix jobs that ended before split_ts
    replayed: pd.DataFrame  # jobs submitted at or after split_ts
    split_ts: float | None  # None: everything is replayed


def split_history(jobs: pd.DataFrame, train_fraction: float) -> Split:
    """Cut ``jobs`` into the training prefix and the replayed suffix (see the module docstring)."""
    if jobs is None or len(jobs) == 0:
        raise InputError("the job table is empty: nothing to replay")
    ordered = jobs.sort_values("submit_ts", kind="stable").reset_index(drop=True)
    cut = int(np.floor(train_fraction * len(ordered)))
    if cut == 0:
        return Split(ordered, ordered.iloc[0:0], ordered, None)
    split_ts = float(ordered["submit_ts"].iloc[cut])
    replayed = ordered.loc[ordered["submit_ts"] >= split_ts]
    if replayed.empty:
        raise InputError(f"nothing left to replay after a {train_fraction:.0%} training prefix")
    prefix = ordered.loc[ordered["submit_ts"] < split_ts]
    ended = prefix["end_ts"].notna() & (prefix["end_ts"] < split_ts)
    if ordered["end_ts"].isna().all() and "duration_s" in ordered:
        # a scheduler-input trace (Philly-derived, Gavel): submissions with run times, no recorded
        # schedule. A prefix job counts as ended when it would have ended even if it never waited.
        ended = (prefix["submit_ts"] + pd.to_numeric(prefix["duration_s"], errors="coerce")) < split_ts
    return Split(ordered, prefix.loc[ended].reset_index(drop=True), replayed.reset_index(drop=True), split_ts)


def _source(kind: str, split: Split, config: ExperimentConfig, say: Callable[[str], None]) -> PredictionSource:
    if kind == "oracle":
        return OraclePredictions()
    if kind == "none":
        return NoPredictions()
    from predictor.sim.trained import TrainedPredictions

    return TrainedPredictions(history=split.history, train=split.train, split_ts=split.split_ts,
                              retrain_every_s=config.retrain_every_s, on_phase=say)


def run_experiment(jobs: pd.DataFrame, inventory: Inventory, policies: Sequence[str],
                   config: ExperimentConfig | None = None, *, policy_file: str | None = None,
                   on_phase: Callable[[str], None] | None = None,
                   adjust_policy: Callable[[PolicyConfig], PolicyConfig] | None = None,
                   replay_many: ReplayMany | None = None,
                   ) -> tuple[list[ReplayRecord], dict]:
    """Replay ``jobs`` on ``inventory`` under each named policy.

    Parameters
    ----------
    jobs : DataFrame
        Canonical job table (with ground-truth columns where known).
    inventory : Inventory
    policies : sequence of str
        Names from :data:`POLICIES`, or ``name=path.yaml`` for a policy file of one's own (it is told
        trained predictions).
    config : ExperimentConfig, optional
    policy_file : str, optional
        A policy YAML whose tiers, teams and weights the presets are laid over (``--policy-file``).
    on_phase : callable, optional
        Called with a short description of each phase (the CLI prints it).
    adjust_policy : callable, optional
        Applied to every loaded policy before its replay (a benchmark varying one setting, e.g.
        ``queueing.scheduling_depth``, across every preset).
    replay_many : callable, optional
        Replays the policies (:data:`ReplayMany`); default :func:`replay_each`, one after another in
        this process (``predictor.tune.dask_replays.DaskReplayMany`` replays them in parallel on Dask).

    Returns
    -------
    records : list of ReplayRecord, one per policy in the order given
    run : dict
        What was replayed: input size, split, skipped rows, inventory, assumptions (``report.json``'s
        ``run`` section).
    """
    from predictor.sim.rules import load_policy

    cfg = config or ExperimentConfig()
    say = on_phase or (lambda _msg: None)
    specs = [_spec(p) for p in policies]
    if not specs:
        raise InputError("no policy given: name at least one of " + ", ".join(POLICIES))
    split = split_history(jobs, cfg.train_fraction)
    replayed, any_type = requests_on_inventory(split.replayed, inventory)
    if any_type:
        say(f"{sum(any_type.values()):,} job(s) ask for GPU types the inventory lacks: replayed on any type "
            f"({', '.join(f'{k}: {v:,}' for k, v in sorted(any_type.items()))})")
    table, truth = load_workload(replayed)
    predictions: dict[str, PredictionTable] = {}
    fits: list[dict] = []
    runs: list[tuple[str, PolicyConfig, PredictionTable]] = []
    for spec, path in specs:
        if spec.predictions not in predictions:
            source = _source(spec.predictions, split, cfg, say)
            predictions[spec.predictions] = source.predict(table, inventory)
            say(f"predicted the {len(table):,} replayed job{'s' if len(table) != 1 else ''} ({spec.predictions})")
            fits.extend(getattr(source, "fits", []))
        policy = load_policy(spec.preset if path is None else path, base_file=policy_file)
        if adjust_policy is not None:
            policy = adjust_policy(policy)
        runs.append((spec.name, policy, predictions[spec.predictions]))
    if replay_many is None:
        records = replay_each(table, inventory, runs, cfg.sim, on_phase=say)
    else:
        say(f"replaying {len(table):,} jobs under {', '.join(name for name, _, _ in runs)} in parallel")
        records = list(replay_many(table, inventory, runs, cfg.sim))
    run = _run_info(split, table, truth, inventory, specs, predictions, cfg)
    run["trained_models"] = fits
    run["gpu_requests_replayed_on_any_type"] = any_type
    return records, run


def _spec(name: str) -> tuple[PolicySpec, str | None]:
    if "=" in name:
        label, path = name.split("=", 1)
        return PolicySpec(label, label, "trained", f"policy file {path}"), path
    spec = POLICIES.get(name)
    if spec is None:
        raise InputError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)} (or NAME=policy.yaml)")
    return spec, None


def _run_info(split: Split, table: JobTable, truth: bool, inventory: Inventory,
              specs: list[tuple[PolicySpec, str | None]], predictions: dict[str, PredictionTable],
              cfg: ExperimentConfig) -> dict:
    from predictor.sim.workload import DEFAULT_SLOWDOWN_BY_CLASS

    return {
        "jobs_in_input": int(len(split.history)),
        "training_prefix_jobs": int(len(split.history) - len(split.replayed)),
        "training_jobs_ended_before_split": int(len(split.train)),
        "split_ts": split.split_ts,
        "retrain_every_s": cfg.retrain_every_s,
        "jobs_replayed": int(len(table)),
        "jobs_skipped": table.skipped.counts(),
        "censored_durations_replayed_as_lower_bounds": int(table.censored) if not truth else 0,
        "inventory": {"nodes": len(inventory.nodes), "gpus": inventory.total_gpus,
                      "gpus_by_type": inventory.gpus_by_type()},
        "slowdown_truth": "ground-truth columns" if truth else f"assumed table {DEFAULT_SLOWDOWN_BY_CLASS} (multi-GPU)",
        "policies": {s.name: {"preset": s.preset if p is None else p, "predictions": s.predictions,
                              "summary": s.summary} for s, p in specs},
        "prediction_sources": {k: v.source for k, v in predictions.items()},
        "physics": {"default_checkpoint_s": cfg.sim.default_checkpoint_s, "oom_after_s": cfg.sim.oom_after_s,
                    "max_oom_retries": cfg.sim.max_oom_retries},
    }
