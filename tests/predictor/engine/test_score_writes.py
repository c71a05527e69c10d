"""Scoring writes the Decisions it returns, not those of every tracked job it decided beside them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.schema import conform
from predictor.capacity.inventory import homogeneous_inventory
from predictor.engine.engine import Engine
from predictor.policy import plan as plan_module
from predictor.policy.presets import load_policy
from predictor.store.codec import decision_doc
from tests.serving.doubles import no_model_slot

NOW = 1_800_000_000.0


def _frame(rows: list[dict]) -> pd.DataFrame:
    return conform(pd.DataFrame([{"submit_ts": NOW - 600, "time_limit_s": 7200.0, **r} for r in rows]))


@pytest.fixture
def busy_engine() -> Engine:
    """16 GPUs, 8 held by two running jobs, six tracked pending jobs, most started or reserved."""
    engine = Engine(model=no_model_slot(), policy=load_policy(), inventory=homogeneous_inventory(16))
    running = _frame([{"job_id": f"r{i}", "num_gpus": 4, "state": "RUNNING", "start_ts": NOW - 300} for i in range(2)])
    pending = _frame([{"job_id": f"p{i}", "num_gpus": 2, "state": "PENDING"} for i in range(6)])
    cycle = engine.decide_cluster(pending, running, NOW)
    assert sum(d.action != "wait" for d in cycle.decisions) >= 4
    engine.set_picture(cycle.picture)
    return engine


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Job ids of every Decision written (the real writer runs)."""
    seen: list[str] = []
    real = plan_module.DecisionWriter.write_rows

    def counted(self, rows, *args, **kwargs):  # noqa: ANN001, ANN202
        seen.extend(str(self.ctx.pending.job_id[i]) for i in rows)
        return real(self, rows, *args, **kwargs)

    monkeypatch.setattr(plan_module.DecisionWriter, "write_rows", counted)
    return seen


def test_one_scored_job_writes_one_decision(busy_engine: Engine, writes: list[str]) -> None:
    scored = busy_engine.score(_frame([{"job_id": "new", "num_gpus": 2, "state": "PENDING"}]), NOW)
    assert [s.decision.job_id for s in scored] == ["new"]
    assert writes == ["new"]


def test_a_batch_writes_its_own_decisions_only(busy_engine: Engine, writes: list[str]) -> None:
    batch = _frame([{"job_id": f"n{i}", "num_gpus": 1 + i % 3, "state": "PENDING"} for i in range(5)])
    scored = busy_engine.score(batch, NOW)
    assert sorted(writes) == sorted(s.decision.job_id for s in scored) == [f"n{i}" for i in range(5)]


def test_the_decisions_are_those_of_a_full_plan(busy_engine: Engine) -> None:
    from predictor.policy import intake

    batch = _frame([{"job_id": f"n{i}", "num_gpus": 2 + 2 * (i % 2), "state": "PENDING"} for i in range(4)])
    scored = busy_engine.score(batch, NOW)
    # the same trial picture decided with every Decision written
    predicted, _ = busy_engine.predict_columns(batch, NOW)
    picture = busy_engine.picture
    vocab = picture.vocab.extended(batch)
    trial = picture.with_candidates(intake.pending_jobs(batch, predicted, vocab, busy_engine.layout, NOW), vocab)
    full = busy_engine.plan(trial, NOW)
    assert len(full.decisions) > len(scored)
    for s in scored:
        assert decision_doc(s.decision) == decision_doc(full.decision_for(s.decision.job_id))
    assert {d.action for d in full.decisions} - {"wait"}
    assert np.isin([s.decision.job_id for s in scored], trial.pending.job_id).all()


def test_remembered_gang_searches_decide_as_decide(busy_engine: Engine) -> None:
    """The engine keeps a gang memo across requests (``Engine.plan``): a few hundred jobs scored one by
    one and in batches, each twice (the second time from the memo), decide as ``decide()`` does."""
    from predictor.policy import intake
    from predictor.policy.scheduler import decide

    rng = np.random.default_rng(17)
    rows = [{"job_id": f"s{i}", "state": "PENDING", "num_gpus": int(rng.choice([1, 1, 2, 3, 4, 8, 16, 24])),
             "time_limit_s": float(rng.choice([600, 3600, 7200, 86400])),
             "tier": str(rng.choice(["sla", "standard", "best_effort"])),
             **({"gpu_milli": int(rng.choice([250, 500]))} if rng.random() < 0.15 else {})} for i in range(240)]
    batches = [[r] for r in rows[:200]] + [rows[200 + 10 * k:210 + 10 * k] for k in range(4)]
    for jobs in batches:
        frame = _frame(jobs)
        predicted, _ = busy_engine.predict_columns(frame, NOW)
        picture = busy_engine.picture
        vocab = picture.vocab.extended(frame)
        trial = picture.with_candidates(intake.pending_jobs(frame, predicted, vocab, busy_engine.layout, NOW), vocab)
        reference = decide(trial.snapshot(NOW, busy_engine.team_usage(NOW, trial)), busy_engine.policy)
        for _ in range(2):
            scored = busy_engine.score(frame, NOW)
            assert [decision_doc(s.decision) for s in scored] == \
                [decision_doc(reference.decision_for(r["job_id"])) for r in jobs]
    memo = busy_engine.scheduler().gang_memo
    assert memo.hits > memo.misses  # the memo answered most searches


def test_scoring_the_id_of_a_running_job_is_refused(busy_engine: Engine) -> None:
    from features.errors import InputError

    with pytest.raises(InputError, match="job r1 is already running"):
        busy_engine.score(_frame([{"job_id": "n0", "num_gpus": 1, "state": "PENDING"},
                                  {"job_id": "r1", "num_gpus": 1, "state": "PENDING"}]), NOW)
    # a tracked pending job's id replaces it (scored as if resubmitted), not an error
    assert [s.decision.job_id for s in busy_engine.score(_frame([{"job_id": "p0", "num_gpus": 1,
                                                                  "state": "PENDING"}]), NOW)] == ["p0"]


def test_the_engine_decides_through_the_replays_scheduler_with_the_full_walk(busy_engine: Engine) -> None:
    """One scheduler per thread and policy (the replay's ``IncrementalScheduler``), thin walk off (every
    Decision it writes needs the full walk's reasons); a policy change keeps the gang memo."""
    from predictor.policy.incremental import IncrementalScheduler

    busy_engine.score(_frame([{"job_id": "n0", "num_gpus": 2, "state": "PENDING"}]), NOW)
    held = busy_engine.scheduler()
    assert isinstance(held, IncrementalScheduler) and held.thin_after is None
    assert busy_engine.scheduler() is held and held.gang_memo is not None
    busy_engine.set_policy(busy_engine.policy.model_copy(deep=True))
    fresh = busy_engine.scheduler()
    assert fresh is not held and fresh.policy is busy_engine.policy and fresh.gang_memo is held.gang_memo
