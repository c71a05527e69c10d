"""``prior_kappa`` / ``topology_design`` / ``TopologyEstimator.predict`` (one pass over the columns,
``models.topology._inputs``) against the code they replaced, kept here as the oracle: bit for bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.history import JobColumns, numeric_column, object_column
from features.schema import PLACEMENT_CLASSES
from models.bundle import JobPredictorBundle
from models.topology import (
    PRIOR_BANDWIDTH_GBPS,
    PRIOR_EFFECTIVE_TFLOPS,
    PRIOR_EXPOSED_SHARE,
    PRIOR_TOKENS_PER_SAMPLE,
    PRIOR_UNKNOWN_KAPPA,
    prior_kappa,
    topology_design,
)


def old_prior_kappa(jobs):  # noqa: ANN001, ANN201
    n = np.nan_to_num(numeric_column(jobs, "num_gpus"), nan=1.0)
    p = numeric_column(jobs, "model_params")
    method = object_column(jobs, "finetune_method")
    lora = np.array([m in ("lora", "qlora") for m in method])
    precision = object_column(jobs, "precision")
    g = np.array([4.0 if (pr in ("fp32", "tf32") or not isinstance(pr, str)) else 2.0 for pr in precision])
    trainable = np.where(lora, 0.005 * p, p)
    grad_bytes = np.where(lora, 4.0, g)
    batch = numeric_column(jobs, "batch_size")
    seq = numeric_column(jobs, "seq_len")
    tokens = np.where(batch > 0, batch, 1.0) * np.where(seq > 0, seq, PRIOR_TOKENS_PER_SAMPLE)
    flops = np.where(lora, 4.0, 6.0) * p * tokens
    t_compute = flops / (PRIOR_EFFECTIVE_TFLOPS * 1e12)
    volume = 2.0 * (n - 1.0) / np.maximum(n, 1.0) * trainable * grad_bytes
    t_comm = PRIOR_EXPOSED_SHARE * volume / (PRIOR_BANDWIDTH_GBPS[PLACEMENT_CLASSES[-1]] * 1e9)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(p > 0, t_comm / t_compute, PRIOR_UNKNOWN_KAPPA)
    return np.where(n > 1, kappa, 0.0)


def old_topology_design(jobs):  # noqa: ANN001, ANN201
    def log(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(x > 0, np.log(x), np.nan)

    method = object_column(jobs, "finetune_method")
    precision = object_column(jobs, "precision")
    return np.column_stack(
        [
            log(numeric_column(jobs, "model_params")),
            log(numeric_column(jobs, "num_gpus")),
            np.array([float(m in ("lora", "qlora")) if isinstance(m, str) else np.nan for m in method]),
            np.array(
                [(4.0 if p in ("fp32", "tf32") else 2.0) if isinstance(p, str) else np.nan for p in precision]
            ),
            log(numeric_column(jobs, "batch_size")),
            log(numeric_column(jobs, "seq_len")),
            np.log(np.maximum(old_prior_kappa(jobs), 1e-4)),
        ]
    )


def varied(later_jobs: pd.DataFrame) -> pd.DataFrame:
    jobs = later_jobs.head(200).copy().reset_index(drop=True)
    rng = np.random.default_rng(8)
    for col in ("num_gpus", "model_params", "batch_size", "seq_len"):
        jobs.loc[rng.random(len(jobs)) < 0.15, col] = np.nan
    jobs.loc[rng.random(len(jobs)) < 0.1, "num_gpus"] = 0.0
    jobs.loc[3, "num_gpus"] = np.inf  # not a real request: the prior's arithmetic on it is kept
    jobs.loc[4, "model_params"] = -5.0
    for col in ("finetune_method", "precision"):
        jobs.loc[rng.random(len(jobs)) < 0.2, col] = None
    jobs.loc[rng.random(len(jobs)) < 0.2, "finetune_method"] = "qlora"
    jobs.loc[rng.random(len(jobs)) < 0.2, "precision"] = "tf32"
    return jobs


@pytest.mark.parametrize("rows", [slice(0, 0), slice(0, 1), slice(5, 6), slice(0, 200)])
def test_prior_and_design_equal_the_replaced_code(later_jobs: pd.DataFrame, rows: slice) -> None:
    jobs = varied(later_jobs).iloc[rows].reset_index(drop=True)
    for view in (jobs, JobColumns(jobs)):
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(prior_kappa(view), old_prior_kappa(jobs))
            want = old_topology_design(jobs).reshape(len(jobs), -1) if len(jobs) else np.empty((0, 7))
            np.testing.assert_array_equal(topology_design(view), want)


def test_predict_equals_the_replaced_inputs(
    bundle: JobPredictorBundle, later_jobs: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    import models.topology as topology

    jobs = varied(later_jobs)
    with np.errstate(invalid="ignore", over="ignore"):
        got = bundle.topology.predict(jobs)
        monkeypatch.setattr(
            topology,
            "_inputs",
            lambda j: (
                old_prior_kappa(j),
                old_topology_design(j),
                np.nan_to_num(numeric_column(j, "num_gpus"), nan=1.0),
            ),
        )
        want = bundle.topology.predict(jobs)
    np.testing.assert_array_equal(got, want)


def old_predict(est, jobs):  # noqa: ANN001, ANN201
    from features.history import family_keys
    from models.lgbm import predict_booster
    from models.topology import PRIOR_UNKNOWN_KAPPA, SHRINKAGE, slowdowns

    design = old_topology_design(jobs)
    gpus = np.nan_to_num(numeric_column(jobs, "num_gpus"), nan=1.0)
    log_kappa = (
        predict_booster(est.booster_, design)
        if est.booster_ is not None
        else design[:, -1] + est.log_kappa_offset_
    )
    if est.family_log_kappa_:
        for i, f in enumerate(family_keys(jobs)):
            hit = est.family_log_kappa_.get(f) if isinstance(f, str) else None
            if hit is not None:
                k, n = hit
                log_kappa[i] = (n * k + SHRINKAGE * log_kappa[i]) / (n + SHRINKAGE)
    kappa = np.where(gpus > 1, np.exp(log_kappa), 0.0)
    kappa = np.where(np.isfinite(kappa), kappa, PRIOR_UNKNOWN_KAPPA)
    return slowdowns(kappa, est.w_)


def test_predict_with_known_families_equals_the_replaced_code(
    bundle: JobPredictorBundle, synth_jobs: pd.DataFrame, later_jobs: pd.DataFrame
) -> None:
    from features.history import family_keys

    est = bundle.topology
    jobs = pd.concat([synth_jobs.head(300), varied(later_jobs).head(50)], ignore_index=True)
    assert est.family_log_kappa_ and any(
        f in est.family_log_kappa_ for f in family_keys(jobs) if isinstance(f, str)
    )
    with np.errstate(invalid="ignore", over="ignore"):
        for rows in (slice(0, 1), slice(0, 350), slice(300, 350)):
            part = jobs.iloc[rows].reset_index(drop=True)
            np.testing.assert_array_equal(est.predict(JobColumns(part)), old_predict(est, part))
