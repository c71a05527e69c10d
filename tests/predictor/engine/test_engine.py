from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.errors import InputError
from features.schema import conform
from models.fallback import FallbackPredictor
from predictor.capacity.inventory import homogeneous_inventory
from predictor.engine.engine import Engine, UsageCharge
from predictor.engine.model_slot import ModelSlot
from predictor.engine.wiring import parse_model_uri
from predictor.policy.presets import load_policy
from tests.serving.doubles import no_model_slot

NOW = 1_800_000_000.0


def jobs(*rows: dict) -> pd.DataFrame:
    return conform(pd.DataFrame([{"submit_ts": NOW, "state": "PENDING", "time_limit_s": 7200.0, **r} for r in rows]))


@pytest.fixture
def engine() -> Engine:
    return Engine(model=no_model_slot(), policy=load_policy(), inventory=homogeneous_inventory(16))


def test_score_predicts_and_decides_in_input_order(engine: Engine) -> None:
    scored = engine.score(jobs({"job_id": "b", "num_gpus": 8}, {"job_id": "a", "num_gpus": 4}), NOW)
    assert [s.prediction.job_id for s in scored] == ["b", "a"] == [s.decision.job_id for s in scored]
    assert scored[0].prediction.duration_p50_s == 3600.0
    assert scored[0].decision.action == "start" and scored[0].decision.num_gpus == 8
    assert scored[0].prediction.fallback and scored[0].decision.fallback


def test_a_batch_competes_for_the_same_gpus(engine: Engine) -> None:
    scored = engine.score(jobs(*[{"job_id": f"j{i}", "num_gpus": 8} for i in range(3)]), NOW)
    actions = [s.decision.action for s in scored]
    assert actions.count("start") == 2 and set(actions) - {"start"} <= {"reserve", "wait"}


def test_scoring_changes_nothing(engine: Engine) -> None:
    before = engine.picture
    engine.score(jobs({"job_id": "a", "num_gpus": 8}), NOW)
    assert engine.picture is before and len(engine.picture.pending) == 0


@pytest.mark.parametrize(("rows", "message"), [
    ([{"job_id": "a", "num_gpus": 1}, {"job_id": "a", "num_gpus": 2}], "job_id 'a' appears twice"),
    ([{"job_id": "a", "num_gpus": 0}], "num_gpus must be at least 1"),
])
def test_bad_batches_are_input_errors(engine: Engine, rows, message) -> None:
    with pytest.raises(InputError, match=message):
        engine.score(jobs(*rows), NOW)


class Exploding:
    def predict_frame(self, jobs, history, now):  # noqa: ANN001, ANN201
        raise FloatingPointError("model diverged on this input")


def test_a_failing_model_falls_back_for_that_request_and_says_why() -> None:
    slot = ModelSlot(uri="models:/job-predictor@champion", resolve=lambda: "job-predictor/7",
                     load=lambda v: Exploding(), fallback=FallbackPredictor(), poll_s=3600)
    slot.check_once()
    engine = Engine(model=slot, policy=load_policy(), inventory=homogeneous_inventory(16))
    preds, model = engine.predict(jobs({"job_id": "a", "num_gpus": 1}), NOW)
    assert model.fallback and bool(preds["fallback"].iloc[0])
    assert preds["fallback_reason"].iloc[0].startswith("model job-predictor/7 failed on this input: FloatingPointError")


class HistoryEcho:
    """Predicts the number of finished jobs the history holds as the p50 (to see what it is given)."""

    version = "job-predictor/1"

    def predict_frame(self, jobs, history, now):  # noqa: ANN001, ANN201
        out = FallbackPredictor().predict_frame(jobs, history, now)
        out["duration_p50_s"] = float(len(history))
        out["model_version"], out["fallback"] = self.version, False
        return out


def test_finished_jobs_reach_the_history_of_every_model() -> None:
    versions = iter(["job-predictor/1", "job-predictor/2"])
    slot = ModelSlot(uri="models:/job-predictor@champion", resolve=lambda: next(versions),
                     load=lambda v: HistoryEcho(), fallback=FallbackPredictor(), poll_s=3600)
    slot.check_once()
    engine = Engine(model=slot, policy=load_policy(), inventory=homogeneous_inventory(16))
    done = {"job_id": "old", "user": "u", "team": "nlp", "num_gpus": 1.0, "submit_ts": NOW - 100,
            "start_ts": NOW - 90, "end_ts": NOW - 10, "state": "COMPLETED"}
    assert engine.add_finished([done]) == 1
    assert engine.add_finished([done]) == 0  # once
    assert engine.predict(jobs({"job_id": "a", "num_gpus": 1}), NOW)[0]["duration_p50_s"].iloc[0] == 1.0
    slot.check_once()  # a new version: its history is re-seeded with the tracked finished jobs
    preds, model = engine.predict(jobs({"job_id": "a", "num_gpus": 1}), NOW)
    assert model.version == "job-predictor/2" and preds["duration_p50_s"].iloc[0] == 1.0


def test_usage_charges_count_once_and_decay(engine: Engine) -> None:
    charge = UsageCharge("nlp", "a", 8.0, NOW - 3600, NOW)
    assert engine.charge([charge, charge]) == 1
    assert engine.team_usage(NOW)["nlp"] == pytest.approx(8 * 3600, rel=0.01)  # decays a little in the hour
    week = load_policy().factors.fairshare.half_life_s
    assert engine.team_usage(NOW + week) == pytest.approx({"nlp": engine.team_usage(NOW)["nlp"] / 2})


def test_started_jobs_get_their_planned_gpus_when_free(engine: Engine) -> None:
    placed = engine.place_started(engine.picture, 8, 1000, [("node-0001", list(range(8)))])
    assert placed == [("node-0001", list(range(8)))]
    anywhere = engine.place_started(engine.picture, 4, 1000, None)
    assert anywhere is not None and sum(len(g) for _, g in anywhere) == 4
    assert engine.place_started(engine.picture, 32, 1000, None) is None
    assert len(np.unique([n for n, _ in anywhere])) == 1  # a 4-GPU gang fits one NVLink island


@pytest.mark.parametrize(("uri", "parsed"), [
    ("models:/job-predictor@champion", ("job-predictor", "champion", None)),
    ("models:/job-predictor/3", ("job-predictor", None, "3")),
])
def test_model_uris(uri, parsed) -> None:
    assert parse_model_uri(uri) == parsed


@pytest.mark.parametrize("uri", ["job-predictor", "models:/", "models:/job-predictor/latest", "runs:/abc/model"])
def test_bad_model_uris(uri) -> None:
    with pytest.raises(InputError, match="PREDICTOR_MODEL_URI"):
        parse_model_uri(uri)
