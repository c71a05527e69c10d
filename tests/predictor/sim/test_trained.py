"""Trained predictions in a replay: fit only on the past, predict point in time, never read the truth."""

import numpy as np
import pytest

from features.synth import generate
from models.lgbm import BoosterParams
from predictor.capacity.inventory import homogeneous_inventory
from predictor.sim.experiment import split_history
from predictor.sim.trained import TrainedPredictions
from predictor.sim.workload import load_workload

pytestmark = pytest.mark.slow
LIGHT = {"duration_params": BoosterParams(n_estimators=30, num_threads=1)}


def _predict(frame, fraction=0.4):
    split = split_history(frame, fraction)
    table, _ = load_workload(split.replayed)
    source = TrainedPredictions(history=split.history, train=split.train, split_ts=split.split_ts, fit_options=LIGHT)
    return split, table, source, source.predict(table, homogeneous_inventory(64))


def test_trained_on_ended_prefix_only_and_blind_to_the_future_and_to_the_truth():
    frame = generate(600, seed=4, cluster_gpus=64, target_load=0.8)
    split, table, source, before = _predict(frame)
    assert [f["train_jobs"] for f in source.fits] == [len(split.train)]
    assert (split.train["end_ts"] < split.split_ts).all()
    assert np.isfinite(before.p50_s).all() and not before.fallback.any()
    assert (before.p10_s <= before.p50_s).all() and (before.p50_s <= before.p90_s).all()

    # rewrite the future: every job that ends late in the log, and every ground-truth column
    changed = frame.copy()
    late = changed["end_ts"] > changed["end_ts"].quantile(0.8)
    changed.loc[late, "duration_s"] *= 7.0
    changed.loc[late, "end_ts"] = changed.loc[late, "start_ts"] + changed.loc[late, "duration_s"]
    for col in ("true_duration_s", "true_peak_vram_mib", "comm_intensity"):
        changed[col] = changed[col] * 3.0 + 1.0
    _, table2, _, after = _predict(changed)
    assert list(table2.job_ids) == list(table.job_ids)
    # a job submitted before the first rewritten job ended (in the original log) cannot see any rewrite
    first_change = frame.loc[late, "end_ts"].min()
    blind = table.frame["submit_ts"].to_numpy() <= first_change
    assert blind.sum() > 50
    for a, b in ((before.p50_s, after.p50_s), (before.p90_s, after.p90_s),
                 (before.peak_vram_upper_mib, after.peak_vram_upper_mib)):
        np.testing.assert_array_equal(a[blind], b[blind])


def test_rolling_retraining_refits_on_what_had_ended_by_each_window():
    frame = generate(600, seed=6, cluster_gpus=64, target_load=0.8)
    split = split_history(frame, 0.3)
    table, _ = load_workload(split.replayed)
    span = table.submit_s.max()
    source = TrainedPredictions(history=split.history, train=split.train, split_ts=split.split_ts,
                                retrain_every_s=span / 3 + 1, fit_options=LIGHT)
    preds = source.predict(table, homogeneous_inventory(64))
    starts = [f["window_start_ts"] for f in source.fits]
    assert len(starts) == 3 and starts == sorted(starts)
    sizes = [f["train_jobs"] for f in source.fits]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]  # later windows know more ended jobs
    ended = split.history["end_ts"]
    for fit in source.fits[1:]:
        assert fit["train_jobs"] == int((ended.notna() & (ended < fit["window_start_ts"])).sum())
    assert len(set(preds.model_version)) == 3
