"""The duration model's scoring path (``DurationEstimator._predict_anchored``, ``SegmentPlan.apply``,
``segment_ids``, ``AnchoredDesign.parts``) against the code it replaced, kept here as the reference:
equal to the last bit on one row, many rows, missing values and users never seen."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from models.bundle import JobPredictorBundle
from models.duration import SNAP_LOG
from models.duration_anchor import AnchoredDesign
from models.duration_segments import (
    _GLOBAL,
    DEPTH_EDGES,
    SPREAD_EDGES,
    SegmentPlan,
    _candidates,
    _filled,
    segment_ids,
)


# -- the replaced code (before issue 17), verbatim but for names -----------------------------------
def ref_segment_ids(user_n, has_limit, spread=None):  # noqa: ANN001, ANN201
    depth = np.searchsorted(np.asarray(DEPTH_EDGES, float), np.nan_to_num(user_n, nan=0.0), side="right") - 1
    if spread is None:
        spread = np.full(len(depth), np.nan)
    sbin = np.searchsorted(np.asarray(SPREAD_EDGES), np.nan_to_num(spread, nan=0.0), side="right") - 1
    cell = np.where(depth < 2, depth, 2 + (depth - 2) * len(SPREAD_EDGES) + sbin)
    return cell * 2 + np.asarray(has_limit, dtype=bool).astype(int)


def ref_apply(plan: SegmentPlan, seg, model_q, baselines, empirical):  # noqa: ANN001, ANN201
    out = np.empty_like(model_q)
    candidates = _candidates(model_q, baselines)
    known = np.isfinite(empirical).all(axis=1)
    for s in np.unique(seg).tolist():
        rows = seg == s
        key = s if s in plan.point else _GLOBAL
        model = candidates["model"][rows]
        out[rows, 1] = _filled(candidates.get(plan.point[key], candidates["model"])[rows], model)
        kind, shift, model_shift = plan.interval[key]
        use_emp = rows & known if kind == "empirical" else np.zeros(len(seg), bool)
        use_model = rows & ~use_emp
        out[use_model, 0] = model_q[use_model, 0] - model_shift
        out[use_model, 2] = model_q[use_model, 2] + model_shift
        out[use_emp, 0] = empirical[use_emp, 0] - shift
        out[use_emp, 2] = empirical[use_emp, 1] + shift
    lo, hi = np.minimum(out[:, 0], out[:, 2]), np.maximum(out[:, 0], out[:, 2])
    out[:, 0], out[:, 2] = lo, hi
    out[:, 1] = np.clip(out[:, 1], lo, hi)
    return out


def ref_predict_log(est, X):  # noqa: ANN001, ANN201
    """``DurationEstimator.predict_log`` as it was: every step through the per-column methods."""
    from models.lgbm import predict_booster

    d = est.design_
    q = est._raw_predict(est.boosters_, d.design(X)) + d.anchor(X)[:, None]
    names = d.names
    has_limit = X[:, names.index("has_time_limit")] > 0
    spread = X[:, names.index("user_recent_q90_logd")] - X[:, names.index("user_recent_q10_logd")]
    seg = ref_segment_ids(X[:, names.index("user_n")], has_limit, spread)
    empirical = est._empirical(X)
    candidates = d.baselines(X)
    if est.mode_booster_ is not None:
        candidates["model_mode"] = predict_booster(est.mode_booster_, d.design(X)) + d.anchor(X)
    out = ref_apply(est.plan_, seg, q, candidates, empirical)
    last1 = X[:, names.index("user_last1_logd")].astype(np.float64) - d.offset(X)
    near = np.isfinite(last1) & (np.abs(out[:, 1] - last1) < SNAP_LOG)
    out[:, 1] = np.clip(np.where(near, last1, out[:, 1]), out[:, 0], out[:, 2])
    return out


# -- inputs -----------------------------------------------------------------------------------------
def varied_jobs(later_jobs: pd.DataFrame) -> pd.DataFrame:
    """Later jobs with missing values and users never seen mixed in."""
    jobs = later_jobs.head(300).copy().reset_index(drop=True)
    rng = np.random.default_rng(5)
    for col in ("time_limit_s", "model_params", "batch_size", "seq_len", "num_gpus"):
        jobs.loc[rng.random(len(jobs)) < 0.2, col] = np.nan
    for col in ("precision", "gpu_type", "job_name"):
        jobs.loc[rng.random(len(jobs)) < 0.2, col] = None
    unseen = rng.random(len(jobs)) < 0.25
    jobs.loc[unseen, "user"] = [f"never-seen-{i}" for i in range(int(unseen.sum()))]
    return jobs


@pytest.fixture(scope="module")
def features(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> np.ndarray:
    jobs = varied_jobs(later_jobs)
    return bundle.builder.transform_array(jobs, bundle.history.state_for(jobs))


def test_the_bundle_uses_the_anchored_model(bundle: JobPredictorBundle) -> None:
    assert bundle.duration.design_ is not None and bundle.duration.plan_ is not None


@pytest.mark.parametrize("rows", [slice(0, 1), slice(7, 8), slice(0, 100), slice(0, 300), slice(0, 0)])
def test_predict_log_equals_the_replaced_code(
    bundle: JobPredictorBundle, features: np.ndarray, rows: slice
) -> None:
    X = features[rows]
    np.testing.assert_array_equal(bundle.duration.predict_log(X), ref_predict_log(bundle.duration, X))


def test_every_single_row_equals_the_replaced_code(bundle: JobPredictorBundle, features: np.ndarray) -> None:
    for i in range(0, len(features), 7):
        X = features[i : i + 1]
        np.testing.assert_array_equal(bundle.duration.predict_log(X), ref_predict_log(bundle.duration, X))


def test_nan_and_extreme_feature_rows(bundle: JobPredictorBundle, features: np.ndarray) -> None:
    X = np.repeat(features[:4], 6, axis=0)
    X[4:8] = np.nan  # nothing known
    names = bundle.duration.design_.names
    X[8:12, names.index("user_n")] = -1.0
    X[12:16, names.index("user_n")] = np.inf
    X[16:20, names.index("user_recent_q10_logd")] = np.nan
    X[20:24, names.index("log_time_limit_s")] = np.nan
    X[20:22, names.index("user_last1_logd")] = np.nan
    np.testing.assert_array_equal(bundle.duration.predict_log(X), ref_predict_log(bundle.duration, X))


def test_parts_equal_the_per_column_methods(bundle: JobPredictorBundle, features: np.ndarray) -> None:
    d: AnchoredDesign = bundle.duration.design_
    off, limit, base, anchor = d.parts(features)
    np.testing.assert_array_equal(off, d.offset(features))
    np.testing.assert_array_equal(anchor, d.anchor(features))
    for j, name in enumerate(d.available):
        np.testing.assert_array_equal(base[:, j], d.baseline(features, name))
    np.testing.assert_array_equal(d.design_from(features, base, anchor), d.design(features))
    np.testing.assert_array_equal(np.where(np.isfinite(limit), 0.0, np.nan), d.baselines(features)["offset"])


def test_segment_ids_equal_the_replaced_code() -> None:
    rng = np.random.default_rng(3)
    user_n = rng.choice([np.nan, -np.inf, np.inf, -1.0, 0.0, 1.0, 2.0, 3.0, 9.5, 10.0, 50.0], 500).astype(
        np.float32
    )
    spread = rng.choice([np.nan, np.inf, -np.inf, -0.1, 0.0, 0.7, 0.69, 1.5, 2.9, 3.0, 9.0], 500).astype(
        np.float32
    )
    has = rng.random(500) < 0.5
    np.testing.assert_array_equal(segment_ids(user_n, has, spread), ref_segment_ids(user_n, has, spread))
    np.testing.assert_array_equal(segment_ids(user_n, has), ref_segment_ids(user_n, has))
    assert segment_ids(user_n, has, spread).dtype == ref_segment_ids(user_n, has, spread).dtype


def test_apply_with_unknown_segments_and_names(bundle: JobPredictorBundle) -> None:
    plan = pickle.loads(pickle.dumps(bundle.duration.plan_))
    rng = np.random.default_rng(9)
    n = 200
    q = np.sort(rng.normal(size=(n, 3)), axis=1)
    base = {
        "user_last2": np.where(rng.random(n) < 0.3, np.nan, rng.normal(size=n)),
        "user_recent": rng.normal(size=n),
        "offset": np.where(rng.random(n) < 0.5, 0.0, np.nan),
    }
    emp = np.where(rng.random((n, 2)) < 0.2, np.nan, rng.normal(size=(n, 2)))
    plan.point[4] = "no-such-candidate"  # falls back on the model's point
    plan.interval.setdefault(4, ("empirical", 0.1, 0.2))
    plan.__dict__.pop("_lookups", None)
    for seg in (rng.integers(0, 28, n), rng.integers(-3, 40, n), np.full(n, 4)):
        np.testing.assert_array_equal(plan.apply(seg, q, base, emp), ref_apply(plan, seg, q, base, emp))


def test_caches_stay_out_of_pickles(bundle: JobPredictorBundle, features: np.ndarray) -> None:
    bundle.duration.predict_log(features[:5])
    assert "positions" in bundle.duration.design_.__dict__ and "_lookups" in bundle.duration.plan_.__dict__
    copy = pickle.loads(pickle.dumps(bundle.duration))
    assert "positions" not in copy.design_.__dict__ and "_lookups" not in copy.plan_.__dict__
    assert copy.design_ == bundle.duration.design_
    np.testing.assert_array_equal(copy.predict_log(features), bundle.duration.predict_log(features))
