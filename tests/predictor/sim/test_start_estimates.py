"""The replay's start-estimate measurement (``predictor.sim.start_estimates``) on hand-checkable workloads."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.capacity.inventory import homogeneous_inventory
from predictor.sim.metrics import start_estimate_metrics
from predictor.sim.predictions import OraclePredictions
from predictor.sim.replay import Replay, SimConfig
from predictor.sim.report import build_report
from predictor.sim.rules import PolicyRules, load_policy
from predictor.sim.start_estimates import EstimatingRules, start_estimate_report
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows


def _replay(rows: JobRows, gpus: int, preset: str = "ours", estimating: bool = True):
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(gpus)
    preds = OraclePredictions().predict(table, inv)
    rules = PolicyRules(preset, load_policy(preset), table, inv, preds)
    wrapped = EstimatingRules(rules) if estimating else rules
    rec = Replay(table, inv, wrapped, preds, SimConfig()).run()
    return rec, (wrapped.estimates if estimating else None)


def test_with_exact_predictions_and_no_later_arrivals_the_estimate_is_the_replayed_start() -> None:
    rows = JobRows()
    for i in range(3):  # three 8-GPU jobs at once on 8 GPUs: they run one after another
        rows.add(f"j{i}", gpus=8, run=1000.0 * (i + 1), submit=0.0, time_limit_s=20_000.0)
    rec, est = _replay(rows, 8)
    ok = np.isfinite(est.made_at)
    assert ok.all() and (est.made_at == rec.jobs.submit_s).all()  # made at submit
    np.testing.assert_allclose(est.p50, rec.first_start, atol=1e-6)
    block = start_estimate_report(rec, est)
    assert block["model"]["n"] == 3 and block["model"]["median_abs_error_s"] == pytest.approx(0.0, abs=1e-6)
    assert block["model"]["coverage"] == 1.0 and block["model"]["within_10pct_of_wait"] == 1.0
    # the time-limit plan books every job for 20,000 s: the second starts at 20,000, the third at 40,000
    order = np.argsort(rec.first_start)
    np.testing.assert_allclose(est.time_limit[order], [0.0, 20_000.0, 40_000.0], atol=1e-6)
    assert block["time_limit"]["median_abs_error_s"] == pytest.approx(abs(20_000.0 - rec.first_start[order[1]]))


def test_a_log_without_time_limits_has_no_time_limit_block() -> None:
    rows = JobRows().add("a", gpus=8, run=500.0).add("b", gpus=8, run=500.0, submit=10.0)
    rec, est = _replay(rows, 8)
    block = start_estimate_report(rec, est)
    assert "time_limit" not in block and block["model"]["n"] == 2
    doc = build_report([rec], {}, start_estimates={rec.policy: block})
    assert doc["extra"][rec.policy]["start_estimate"]["model"]["n"] == 2


def test_recording_estimates_changes_nothing_in_the_replay() -> None:
    rows = JobRows()
    rng = np.random.default_rng(3)
    for i in range(30):
        rows.add(f"j{i}", gpus=int(rng.choice([1, 2, 4, 8])), run=float(rng.uniform(100, 3000)),
                 submit=float(rng.uniform(0, 4000)), team=str(rng.choice(["a", "b"])))
    plain, _ = _replay(rows, 16, estimating=False)
    measured, est = _replay(rows, 16)
    np.testing.assert_array_equal(plain.first_start, measured.first_start)
    np.testing.assert_array_equal(plain.end, measured.end)
    assert np.isfinite(est.made_at).all()


def test_metrics_definitions() -> None:
    actual = np.array([100.0, 200.0, 300.0, 400.0])
    wait = np.array([100.0, 1000.0, 50.0, 0.0])
    est = np.array([110.0, 250.0, np.nan, 400.0])
    m = start_estimate_metrics(est, actual, wait, lo=est - 20, hi=est + 20)
    assert m["n"] == 4
    assert m["median_abs_error_s"] == pytest.approx(30.0)  # errors 10, 50, inf, 0
    assert m["coverage"] == pytest.approx(0.5)  # 100 in [90, 130], 400 in [380, 420]
    assert m["within_10pct_of_wait"] == pytest.approx(0.75)  # tolerance max(10 % of wait, 60 s): 60, 100, -, 60
    point = start_estimate_metrics(est, actual, wait)
    assert point["coverage"] == pytest.approx(0.75)  # started no later than the estimate


def test_calibration_learns_from_earlier_starts_and_moves_only_the_interval() -> None:
    from predictor.queue.start_calibration import StartCalibration

    rows = JobRows()
    rng = np.random.default_rng(5)
    for i in range(80):
        rows.add(f"j{i}", gpus=int(rng.choice([1, 2, 4, 8])), run=float(rng.uniform(100, 3000)),
                 submit=float(rng.uniform(0, 6000)), team=str(rng.choice(["a", "b"])))
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(8)
    preds = OraclePredictions().predict(table, inv)

    def run(cal):  # noqa: ANN001, ANN202
        wrapped = EstimatingRules(PolicyRules("ours", load_policy("ours"), table, inv, preds), cal)
        return Replay(table, inv, wrapped, preds, SimConfig()).run(), wrapped.estimates

    plain_rec, plain = run(None)
    cal = StartCalibration(min_samples=5, refresh_every=1)
    rec, est = run(cal)
    np.testing.assert_array_equal(plain_rec.first_start, rec.first_start)  # the replay is untouched
    np.testing.assert_array_equal(plain.p50, est.p50)
    np.testing.assert_array_equal(plain.p10, est.raw_p10)
    np.testing.assert_array_equal(plain.p90, est.raw_p90)
    queued = est.raw_p90 > est.made_at + 1e-6
    assert cal.observed == int(queued.sum()) > 5  # every queued job's first start was observed
    assert cal.calibrated and not np.array_equal(plain.p10[queued], est.p10[queued])
    assert (est.p10 <= est.p50 + 1e-9).all() and (est.p50 <= est.p90 + 1e-9).all()
