"""The bundle's one prediction path: contract columns, order, serving == batch, fallback."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from features.errors import InputError
from features.history import HistoryStore, ended_events, history_state
from models.bundle import JobPredictorBundle
from models.fallback import FallbackPredictor
from models.fit import fit_bundle
from models.prediction import PREDICTION_COLUMNS, SLOWDOWN_COLUMNS, Prediction


def check_contract(frame: pd.DataFrame, jobs: pd.DataFrame) -> None:
    assert tuple(frame.columns) == PREDICTION_COLUMNS
    assert list(frame["job_id"]) == [str(j) for j in jobs["job_id"]]
    q = frame[["duration_p10_s", "duration_p50_s", "duration_p90_s"]].to_numpy()
    assert np.all(q > 0) and np.all(np.diff(q, axis=1) >= 0)
    s = frame[list(SLOWDOWN_COLUMNS)].to_numpy()
    assert np.all(s >= 1.0 - 1e-9) and np.all(np.diff(s, axis=1) >= -1e-12)
    for row in frame.to_dict("records"):
        Prediction.from_row(row)  # converts to the single-job contract


def test_predict_frame_keeps_the_contract(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    jobs = later_jobs.iloc[::-1].head(50)  # any order: output follows input
    frame = bundle.predict_frame(jobs)
    check_contract(frame, jobs)
    assert not frame["fallback"].any() and frame["model_version"].eq("unregistered").all()
    limit = jobs["time_limit_s"].to_numpy()
    assert np.all(frame["duration_p90_s"].to_numpy() <= np.where(np.isfinite(limit), limit, np.inf))


def test_fits_follow_the_upper_bound(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    frame = bundle.predict_frame(later_jobs.head(100))
    for upper, fits in zip(frame["peak_vram_upper_mib"], frame["fits_gpu_types"], strict=True):
        names = [t for t in fits.split(",") if t]
        assert all(bundle.gpu_memory_mib[t] >= upper for t in names)
        bigger = [t for t, mib in bundle.gpu_memory_mib.items() if np.isfinite(upper) and mib >= upper]
        assert sorted(names) == sorted(bigger)


def test_serving_path_equals_point_in_time_batch(bundle: JobPredictorBundle, synth_jobs: pd.DataFrame,
                                                 later_jobs: pd.DataFrame) -> None:
    """A store holding exactly the jobs ended before a job's submit time gives the batch prediction."""
    table = pd.concat([synth_jobs, later_jobs], ignore_index=True)
    jobs = later_jobs.head(300).reset_index(drop=True)
    batch = bundle.predict_with_state(jobs, history_state(jobs, ended_events(table)))
    for i in (0, 150, 299):
        store = HistoryStore(table[table["end_ts"] < jobs.loc[i, "submit_ts"]])
        one = bundle.predict_frame(jobs.iloc[[i]], store)
        pd.testing.assert_frame_equal(one.reset_index(drop=True), batch.iloc[[i]].reset_index(drop=True))


def test_bundle_survives_pickling(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    restored = pickle.loads(pickle.dumps(bundle))
    jobs = later_jobs.head(20)
    pd.testing.assert_frame_equal(bundle.predict_frame(jobs), restored.predict_frame(jobs))


def test_missing_submit_time_is_now_and_cpu_jobs_get_no_memory(bundle: JobPredictorBundle,
                                                               later_jobs: pd.DataFrame) -> None:
    jobs = later_jobs.head(3).copy()
    jobs["submit_ts"] = np.nan
    jobs.loc[jobs.index[0], "num_gpus"] = 0.0
    frame = bundle.predict_frame(jobs, now=float(later_jobs["submit_ts"].max()))
    assert np.isnan(frame.loc[0, "peak_vram_mib"]) and frame.loc[0, "fits_gpu_types"] == ""
    assert np.isfinite(frame.loc[1, "duration_p50_s"])


def test_minimal_request_only_needs_a_job_id(bundle: JobPredictorBundle) -> None:
    frame = bundle.predict_frame(pd.DataFrame({"job_id": ["x"]}), now=1.8e9)
    check_contract(frame, pd.DataFrame({"job_id": ["x"]}))
    with pytest.raises(InputError, match="job_id"):
        bundle.predict_frame(pd.DataFrame({"user": ["u"]}))


def test_fallback_has_the_same_interface(later_jobs: pd.DataFrame) -> None:
    fallback = FallbackPredictor(reason="registry unreachable")
    jobs = later_jobs.head(30)
    frame = fallback.predict_frame(jobs, HistoryStore(), now=None)
    check_contract(frame, jobs)
    assert frame["fallback"].all() and frame["fallback_reason"].eq("registry unreachable").all()
    assert frame["model_version"].eq("fallback").all()
    with_limit = jobs["time_limit_s"].notna().to_numpy()
    assert np.allclose(frame["duration_p50_s"].to_numpy()[with_limit],
                       np.minimum(0.5 * jobs["time_limit_s"].to_numpy()[with_limit],
                                  jobs["time_limit_s"].to_numpy()[with_limit]))


def test_fallback_uses_history_medians(later_jobs: pd.DataFrame) -> None:
    done = later_jobs[later_jobs["state"].eq("COMPLETED")].head(200)
    store = HistoryStore(done)
    frame = FallbackPredictor().predict_frame(done.head(5).assign(submit_ts=2e9), store)
    assert np.all(frame["duration_p50_s"] > 0)
    assert not np.allclose(frame["duration_p50_s"], 0.5 * done.head(5)["time_limit_s"].fillna(7200.0))


def test_fit_bundle_refuses_tables_without_durations(synth_jobs: pd.DataFrame) -> None:
    with pytest.raises(InputError, match="at least 20 jobs"):
        fit_bundle(synth_jobs.head(40).assign(duration_s=np.nan))
