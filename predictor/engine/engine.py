"""The engine: load a model (or the fallback), predict for incoming jobs, and decide with the rules layer.

It holds what scoring reads and nothing it writes: the model slot (hot-reloaded from the registry),
the finished-job history the features read, the fair-share ledger, the policy, the inventory, and a
picture of the tracked queue (pending and running jobs as arrays). ``score`` puts candidate jobs into
that picture as if they had just been submitted, runs ``predictor.policy.decide`` on it and returns a
(Prediction, Decision) per job; nothing changes. The tracked queue (``predictor.queue.tracked_queue``)
persists and calls the same engine, so the HTTP service, ``predictor sync`` and tests share one path.

Thread safety: every swap (model, policy, picture) is one reference assignment; a request reads each
once. The history is updated under a lock held also while predicting.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.errors import InputError
from features.history import HistoryStore
from models.prediction import PREDICTION_COLUMNS, Prediction
from predictor.capacity.inventory import Inventory
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.capacity.placement import find_gang
from predictor.engine.model_slot import LoadedModel, ModelSlot
from predictor.engine.predictions import predict_with, prediction_columns, predictions_from_columns
from predictor.engine.queue_picture import QueuePicture, canonical_frame
from predictor.policy import intake
from predictor.policy.config import PolicyConfig
from predictor.policy.decision import Decision
from predictor.policy.incremental import IncrementalScheduler
from predictor.policy.ledger import FairShareLedger, JobEvent
from predictor.policy.plan import SchedulePlan
from predictor.policy.scheduler import write_plan

__all__ = ["Engine", "Scored", "ScoredBatch", "UsageCharge", "ClusterDecisions", "decisions_for_rows",
           "predictions_from_columns", "prediction_columns"]

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Scored:
    """One scored job."""

    prediction: Prediction
    decision: Decision


@dataclass(frozen=True, slots=True)
class ScoredBatch:
    """Scored jobs as the serving path keeps them: the prediction columns, one Decision per job."""

    predicted: dict[str, np.ndarray]  # PREDICTION_COLUMNS, input order
    decisions: list[Decision]  # input order
    model: LoadedModel  # what predicted (a hot reload during the request does not change it)

    def __len__(self) -> int:
        return len(self.decisions)


@dataclass(frozen=True)
class ClusterDecisions:
    """A scheduling cycle over a cluster's own picture (:meth:`Engine.decide_cluster`)."""

    decisions: list[Decision]  # one per pending GPU job, in the input's order
    plan: SchedulePlan
    picture: QueuePicture
    model: LoadedModel  # what predicted (``model.version`` is in every decision)
    unplaced: tuple[str, ...] = ()  # running jobs the inventory could not hold (they hold nothing)


@dataclass(frozen=True, slots=True)
class UsageCharge:
    """A finished run charged to a team's fair-share usage."""

    team: str
    job_id: str
    gpus: float  # GPUs held, shares as fractions
    start_ts: float
    end_ts: float

    @property
    def gpu_hours(self) -> float:
        return self.gpus * (self.end_ts - self.start_ts) / 3600.0


class Engine:
    """Predictions plus decisions on the current picture of the cluster.

    Parameters
    ----------
    model : ModelSlot
        The model in use (or the fallback), hot-reloaded in the background.
    policy : PolicyConfig
        The scheduling policy.
    inventory : Inventory
        The cluster's nodes and GPUs.
    """

    def __init__(self, *, model: ModelSlot, policy: PolicyConfig, inventory: Inventory) -> None:
        self.model = model
        self.inventory = inventory
        self.layout = ClusterLayout.of(inventory)
        self._policy = policy
        self._history_lock = threading.Lock()
        self._finished: list[pd.DataFrame] = []  # tracked jobs that ended, to re-seed a new model's history
        self._history_of: tuple[LoadedModel | None, HistoryStore] = (None, HistoryStore())
        self._charges: dict[tuple[str, float], UsageCharge] = {}
        self._ledger = FairShareLedger(policy.factors.fairshare.half_life_s)
        self._picture = QueuePicture.empty(self.layout)
        self._open_runs_cache: tuple[object, float, float, FairShareLedger] | None = None
        self._memos = threading.local()  # one IncrementalScheduler per thread (scoring runs in a thread pool)

    # ------------------------------------------------------------------ what scoring reads
    @property
    def policy(self) -> PolicyConfig:
        return self._policy

    def set_policy(self, policy: PolicyConfig) -> None:
        """Put ``policy`` in force (the ledger is rebuilt if its half-life changed)."""
        if policy.factors.fairshare.half_life_s != self._ledger.half_life_s:
            ledger = FairShareLedger(policy.factors.fairshare.half_life_s)
            for c in self._charges.values():
                ledger.charge(c.team, c.gpus, c.start_ts, c.end_ts)
            self._ledger = ledger
        self._policy = policy

    @property
    def picture(self) -> QueuePicture:
        """The tracked queue as scoring sees it."""
        return self._picture

    def set_picture(self, picture: QueuePicture) -> None:
        self._picture = picture

    def add_finished(self, records: Sequence[dict]) -> int:
        """Add ended jobs (canonical records) to the history the features read; returns how many were new."""
        if not records:
            return 0
        frame = canonical_frame(records)
        with self._history_lock:
            _, history = self._current_history()
            self._finished.append(frame)
            return history.add(frame)

    def charge(self, charges: Iterable[UsageCharge]) -> int:
        """Add finished runs to the fair-share ledger (each run once); returns how many were new."""
        added = 0
        for c in charges:
            key = (c.job_id, c.start_ts)
            if key in self._charges or c.end_ts < c.start_ts:
                continue
            self._charges[key] = c
            self._ledger.charge(c.team, c.gpus, c.start_ts, c.end_ts)
            added += 1
        return added

    def team_usage(self, now: float, picture: QueuePicture | None = None,
                   extra: Sequence[UsageCharge] = ()) -> dict[str, float]:
        """Decayed GPU-seconds per team: finished runs (plus ``extra`` ones not yet recorded) and the
        running jobs' runs so far."""
        usage = self._ledger.usage_at(now)
        fresh = [c for c in extra if (c.job_id, c.start_ts) not in self._charges]
        if fresh:
            more = FairShareLedger(self._ledger.half_life_s)
            for c in fresh:
                more.charge(c.team, c.gpus, c.start_ts, c.end_ts)
            for team, value in more.usage_at(now).items():
                usage[team] = usage.get(team, 0.0) + value
        pic = picture or self._picture
        if len(pic.running):
            for team, value in self._open_runs(pic, now).usage_at(now).items():
                usage[team] = usage.get(team, 0.0) + value
        return usage

    def _open_runs(self, pic: QueuePicture, now: float) -> FairShareLedger:
        """The running jobs' runs so far as a ledger (each run from its start, or from ``now`` if it starts
        later). Built once per set of running jobs and half-life, not per request: a scoring request's
        trial picture shares its running jobs with the tracked picture."""
        running, half_life = pic.running, self._ledger.half_life_s
        cached = self._open_runs_cache
        if cached is not None and cached[0] is running and cached[1] == half_life and cached[2] <= now:
            return cached[3]
        ledger = FairShareLedger(half_life)
        latest = -np.inf
        for i in range(len(running)):
            code = int(running.team[i])
            if code < 0:
                continue
            gpus = float(running.num_gpus[i]) * float(running.gpu_milli[i]) / MILLI
            start = float(running.start_ts[i])
            latest = max(latest, start)
            ledger.record(JobEvent("start", str(running.job_id[i]), min(start, now), pic.vocab.teams.names[code], gpus))
        if latest <= now:  # no start clipped to now: the same ledger serves any later time
            self._open_runs_cache = (running, half_life, latest, ledger)
        return ledger

    # ------------------------------------------------------------------ predict
    def prepare_history(self) -> None:
        """Seed the history for the model in use now (after a swap), so no request pays for the copy."""
        with self._history_lock:
            self._current_history()

    def _current_history(self) -> tuple[LoadedModel, HistoryStore]:
        """The history matching the model in use (re-seeded when the model changed). Hold the lock."""
        model = self.model.current
        owner, history = self._history_of
        if owner is None or owner.version != model.version:
            base = getattr(model.predictor, "history", None)
            history = copy.deepcopy(base) if isinstance(base, HistoryStore) else HistoryStore()
            for frame in self._finished:
                history.add(frame)
            self._history_of = (model, history)
        return model, history

    def predict(self, jobs: pd.DataFrame, now: float) -> tuple[pd.DataFrame, LoadedModel]:
        """Predictions (``PREDICTION_COLUMNS``, input order) and the model that made them.

        If the model fails on this input, the fallback answers and says why in ``fallback_reason``.
        """
        preds, model = self.predict_columns(jobs, now)
        return pd.DataFrame(preds, columns=list(PREDICTION_COLUMNS)), model

    def predict_columns(self, jobs: pd.DataFrame | None, now: float, *,
                        columns: Mapping[str, np.ndarray] | None = None,
                        fallback_reason: str | None = None) -> tuple[dict[str, np.ndarray], LoadedModel]:
        """:meth:`predict` as one array per ``PREDICTION_COLUMNS`` column; ``columns``: the same jobs as
        ``canonical_columns`` arrays, which a predictor with ``predict_columns`` reads instead of the table
        (``jobs`` may then be None: no table is built unless a predictor needs one).
        ``fallback_reason``: predict with the fallback, for this reason (a deadline the model would miss)."""
        with self._history_lock:
            model, history = self._current_history()
            if fallback_reason is not None and not model.fallback:
                model = LoadedModel(self.model.fallback, "fallback", True, fallback_reason, model.loaded_at)
            try:
                preds = predict_with(model.predictor, jobs, history, now, columns)
            except InputError:
                raise
            except Exception as exc:
                if model.fallback:
                    raise
                log.exception("model %s failed; answering with the fallback", model.version)
                reason = f"model {model.version} failed on this input: {type(exc).__name__}: {exc}"[:300]
                preds = predict_with(self.model.fallback, jobs, history, now, columns)
                model = LoadedModel(self.model.fallback, "fallback", True, reason, model.loaded_at)
        n = len(jobs) if jobs is not None else len(columns["job_id"])  # type: ignore[index]
        if model.fallback and model.fallback_reason:  # the slot knows why no model answers; say that
            preds["fallback"] = np.ones(n, dtype=bool)
            preds["fallback_reason"] = np.full(n, model.fallback_reason, dtype=object)
        missing = [c for c in PREDICTION_COLUMNS if c not in preds]
        if missing:
            raise RuntimeError(f"predictor {model.version} returned no {', '.join(missing)}")
        lengths = {len(preds[c]) for c in PREDICTION_COLUMNS}
        if lengths != {n}:
            raise RuntimeError(f"predictor {model.version} returned {max(lengths - {n})} rows for {n} jobs")
        return preds, model

    # ------------------------------------------------------------------ decide
    def plan(self, picture: QueuePicture, now: float, extra: Sequence[UsageCharge] = (), *,
             policy: PolicyConfig | None = None, explain: bool = True,
             write_rows: np.ndarray | None = None) -> SchedulePlan:
        """Run the rules layer on ``picture`` at ``now`` (``extra``: runs ended but not yet charged;
        ``policy``: decide under this policy instead of the one in force; ``explain``, ``write_rows``:
        see ``decide``).

        ``decide`` through this thread's :class:`~predictor.policy.incremental.IncrementalScheduler`
        (the one the replay uses): the same Decisions, with its gang memo
        (``predictor.capacity.placement.GangMemo``) remembering placements across requests while the
        tracked picture's free capacity is unchanged (every scoring request searches the tracked
        pending jobs' gangs again on the same GPUs). Its thin walk is off: every Decision written here
        needs the full walk's reasons."""
        policy = policy or self._policy
        snapshot = picture.snapshot(now, self.team_usage(now, picture, extra))
        return write_plan(self.scheduler(policy).cycle(snapshot), policy, explain=explain, write_rows=write_rows)

    def scheduler(self, policy: PolicyConfig | None = None) -> IncrementalScheduler:
        """This thread's scheduler for ``policy`` (the one in force by default); its gang memo is kept
        when the policy changes (the memo's answers do not depend on the policy)."""
        policy = policy or self._policy
        held = getattr(self._memos, "scheduler", None)
        if held is None or held.policy is not policy:
            held = self._memos.scheduler = IncrementalScheduler(
                policy, thin_after=None, gang_memo=held.gang_memo if held is not None else None)
        return held

    def score(self, jobs: pd.DataFrame, now: float, *, columns: Mapping[str, np.ndarray] | None = None,
              explain: bool = True) -> list[Scored]:
        """See :meth:`score_with_model`; returns only the scored jobs."""
        return self.score_with_model(jobs, now, columns=columns, explain=explain)[0]

    def score_with_model(self, jobs: pd.DataFrame, now: float, *, columns: Mapping[str, np.ndarray] | None = None,
                         explain: bool = True) -> tuple[list[Scored], LoadedModel]:
        """Predict and decide for ``jobs`` as if they were submitted at ``now``; changes nothing.

        Parameters
        ----------
        jobs : DataFrame of shape (n_jobs, n_columns)
            Canonical job records (``features.schema.conform``-typed, e.g. ``canonical_frame``); ``job_id`` unique; ``num_gpus >= 1``.
            A job with the id of a tracked pending job replaces it in the picture.
        now : float
            Epoch seconds.
        columns : mapping, optional
            The same jobs as one array per column (``canonical_columns``), read instead of the table.
        explain : bool, default True
            Write the readable parts of each decision (``predictor.policy.decide``'s ``explain``): factor
            details, warnings, the reason sentence. False: the same decisions, factor values and
            weights, a terse reason, for less work.

        Returns
        -------
        list of Scored
            In input order. A batch is decided together, as if all its jobs arrived at once.
        LoadedModel
            The model that predicted them (a hot reload during the request does not change it).
        """
        batch = self.score_batch(jobs, now, columns=columns, explain=explain)
        predictions = predictions_from_columns(batch.predicted)
        return [Scored(p, d) for p, d in zip(predictions, batch.decisions, strict=True)], batch.model

    def score_batch(self, jobs: pd.DataFrame | None, now: float, *, columns: Mapping[str, np.ndarray] | None = None,
                    explain: bool = True, fallback_reason: str | None = None) -> ScoredBatch:
        """:meth:`score_with_model` without a ``Prediction`` object per job: the prediction columns and
        the candidates' Decisions (the only Decisions written). What ``POST /v1/score`` calls, with
        ``columns`` (``canonical_columns``) and no table (``jobs=None``).
        ``fallback_reason``: the fallback predicts, for this reason (``predict_columns``)."""
        if jobs is None and columns is None:
            raise TypeError("score_batch needs the jobs as a table or as columns")
        table = jobs if columns is None else columns
        ids = (jobs["job_id"].to_numpy(dtype=object) if columns is None else columns["job_id"]).tolist()
        if len(set(ids)) != len(ids):
            seen: set = set()
            dup = next(i for i in ids if i in seen or seen.add(i))
            raise InputError(f"job_id {dup!r} appears twice in the batch")
        predicted, model = self.predict_columns(jobs, now, columns=columns, fallback_reason=fallback_reason)
        picture = self._picture
        vocab = picture.vocab.extended(table)
        candidates = intake.pending_jobs(table, predicted, vocab, self.layout, now)
        trial = picture.with_candidates(candidates, vocab)
        rows = np.arange(len(trial.pending) - len(candidates), len(trial.pending))
        plan = self.plan(trial, now, explain=explain, write_rows=rows)  # only the Decisions returned
        return ScoredBatch(predicted, decisions_for_rows(plan, rows), model)

    def decide_cluster(self, pending: pd.DataFrame, running: pd.DataFrame, now: float, *,
                       explain: bool = True) -> ClusterDecisions:
        """One scheduling cycle on a cluster's own picture: ``pending`` jobs queue, ``running`` ones
        hold their GPUs (where they run: ``nodes``, else placed by the intake's rule), both predicted
        by the model in use with the history this engine holds, fair-share from the runs charged to
        it plus the running jobs' runs so far. What ``predictor sync`` and ``predictor policy decide``
        call; the service's tracked queue calls :meth:`plan` on its own picture.

        Parameters
        ----------
        pending, running : DataFrame
            Canonical job records (``features.schema``); jobs asking no GPU are left out.
        """
        pending = _gpu_rows(pending)
        running = _gpu_rows(running)
        both = pd.concat([pending, running], ignore_index=True) if len(running) else pending
        if both["job_id"].astype(str).duplicated().any():
            dup = both["job_id"].astype(str)[both["job_id"].astype(str).duplicated()].iloc[0]
            raise InputError(f"job {dup} is both pending and running, or listed twice")
        preds, model = self.predict_columns(both, now) if len(both) else ({}, self.model.current)
        n = len(pending)
        pend_preds = {k: v[:n] for k, v in preds.items()}
        run_preds = {k: v[n:] for k, v in preds.items()}
        picture = QueuePicture.build(self.layout, pending_jobs=pending, pending_preds=pend_preds,
                                     running_jobs=running, running_preds=run_preds,
                                     team_names=list(self._policy.teams), now=now)
        plan = self.plan(picture, now, explain=explain)
        decisions = decisions_for_rows(plan, np.arange(n))
        return ClusterDecisions(decisions, plan, picture, model, picture.unplaced)

    # ------------------------------------------------------------------ placement of started jobs
    def place_started(self, picture: QueuePicture, num_gpus: int, gpu_milli: int,
                      preferred: Sequence[tuple[str, Sequence[int]]] | None,
                      gpu_type: str | None = None) -> list[tuple[str, list[int]]] | None:
        """GPUs a job that just started holds: ``preferred`` (its decision's placement) when those are
        free, else the best free gang; None when nothing fits (the job ran outside the known inventory).
        """
        lay = self.layout
        free = picture.free_milli()
        if preferred:
            try:
                gpus = np.array([lay.gpu_index(node, int(g)) for node, idx in preferred for g in idx], dtype=np.int64)
            except KeyError:
                gpus = np.zeros(0, dtype=np.int64)
            if len(gpus) == num_gpus and (free[gpus] >= gpu_milli).all():
                return [(node, list(idx)) for node, idx in lay.gpu_indices_by_node(gpus)]
        usable = free >= gpu_milli
        types = [lay.type_index(gpu_type)] if gpu_type and lay.type_index(gpu_type) >= 0 else range(lay.n_types)
        for t in types:
            choice = find_gang(lay, usable & lay.type_masks[t], num_gpus,
                               free_milli=free if gpu_milli < MILLI else None)
            if choice is not None:
                return [(node, list(idx)) for node, idx in lay.gpu_indices_by_node(choice.gpus)]
        return None


def _gpu_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` that ask for at least one GPU (the rules layer schedules GPU jobs only)."""
    if "num_gpus" not in frame.columns:
        return frame.reset_index(drop=True)
    return frame.loc[pd.to_numeric(frame["num_gpus"], errors="coerce").fillna(0).to_numpy() >= 1].reset_index(drop=True)


def decisions_for_rows(plan: SchedulePlan, rows: np.ndarray) -> list[Decision]:
    """The decisions of pending rows ``rows`` of a plan (written together where the plan has none)."""
    return plan.decisions_for_rows(rows.tolist())
