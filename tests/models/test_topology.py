"""Topology slowdown: monotone across placement classes, learned from placement-labelled runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from features.schema import PLACEMENT_CLASSES
from models.topology import TopologyEstimator, prior_kappa, slowdowns


@settings(max_examples=80, deadline=None)
@given(
    kappa=arrays(np.float64, 6, elements=st.floats(0, 1e4)),
    w=arrays(np.float64, len(PLACEMENT_CLASSES), elements=st.floats(1e-4, 10)),
)
def test_worse_placements_are_never_faster(kappa: np.ndarray, w: np.ndarray) -> None:
    s = slowdowns(kappa, np.sort(w))
    assert np.all(np.diff(s, axis=1) >= -1e-12)
    assert np.allclose(s[:, 0], 1.0) and np.all(s >= 1.0 - 1e-12)


def test_single_gpu_jobs_cross_no_link() -> None:
    jobs = pd.DataFrame({"job_id": ["a", "b"], "num_gpus": [1.0, 8.0], "model_params": [7e9, 7e9],
                         "precision": ["bf16", "bf16"], "finetune_method": ["full", "full"],
                         "batch_size": [4.0, 4.0], "seq_len": [2048.0, 2048.0]})
    est = TopologyEstimator().fit(jobs.iloc[:0])
    s = est.predict(jobs)
    assert np.allclose(s[0], 1.0)
    assert s[1, -1] > 1.1  # a 7B data-parallel job on cross-rack links is slower
    assert prior_kappa(jobs)[0] == 0.0


@pytest.mark.parametrize(("params", "more"), [(7e9, 70e9), (1e9, 1e9)], ids=["bigger-model", "same"])
def test_prior_grows_with_gradient_volume_per_token(params: float, more: float) -> None:
    jobs = pd.DataFrame({"job_id": ["a", "b"], "num_gpus": [8.0, 8.0], "model_params": [params, more],
                         "batch_size": [8.0, 1.0], "seq_len": [2048.0, 2048.0]})
    k = prior_kappa(jobs)
    assert k[1] >= k[0]


def placement_history(n_families: int, seed: int, true_w: np.ndarray) -> tuple[pd.DataFrame, dict[str, float]]:
    """Families run on random placements; throughput = base / slowdown(kappa_f, placement) x noise."""
    rng = np.random.default_rng(seed)
    rows, truth = [], {}
    for f in range(n_families):
        kappa = float(np.exp(rng.uniform(-3, 2)))
        truth[f"u{f}/fam"] = kappa
        base = rng.uniform(1, 100)
        slow = slowdowns(np.array([kappa]), true_w)[0]
        for j in range(12):
            c = rng.integers(0, len(PLACEMENT_CLASSES))
            rows.append({"job_id": f"{f}-{j}", "user": f"u{f}", "job_name": "fam", "num_gpus": 8.0,
                         "placement_class": PLACEMENT_CLASSES[c], "state": "COMPLETED",
                         "throughput": base / slow[c] * np.exp(rng.normal(0, 0.02)), "model_params": 1e9 * (1 + f % 5)})
    return pd.DataFrame(rows), truth


def test_learns_class_weights_and_family_kappa() -> None:
    true_w = np.array([0.02, 0.3, 0.4, 0.6, 1.0])
    jobs, truth = placement_history(60, seed=1, true_w=true_w)
    est = TopologyEstimator().fit(jobs)
    assert est.n_families_ == 60
    assert np.all(np.diff(est.w_) >= 0)
    assert est.w_[1:4] == pytest.approx(true_w[1:4], rel=0.25)
    predicted = est.predict(jobs)
    actual = np.vstack([slowdowns(np.array([truth[f"{u}/fam"]]), true_w)[0] for u in jobs["user"]])
    assert np.median(np.abs(np.log(predicted / actual))) < 0.03
