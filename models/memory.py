"""Peak GPU memory per GPU: analytic estimate, learned correction, conformal upper bound, fit per GPU.

1. ``models.memory_analytic.analytic_memory`` gives the estimate ``A`` and its upper bound ``U``
   from the record alone, with constants fitted on measured peaks of public projects (shipped in
   ``models/calibration/``): this is the whole prediction of a model trained on a log without
   measured peaks, as most cluster logs are.
2. Where the cluster's own log has measured peaks (``measured_peaks``: never a synthetic
   generator's, never an out-of-memory run's), two LightGBM boosters learn the correction ``r = log(actual / A)``
   from the job features (including the family's and request signature's last measured peak)
   plus the analytic components (states, activations, assumed ZeRO stage, GPU memory) and the
   differences to the last measured run (``memory_design``): a median (``point = A * exp(r50)``)
   and an upper quantile ``UPPER_QUANTILE``.
   With fewer than ``min_labelled`` measured jobs the correction is a constant (the median and the
   upper quantile of ``r``), which still removes a systematic bias; its bound never falls below
   ``U`` (a handful of peaks does not outweigh the public tables).
3. With boosters, the upper bound is conformalised one-sided on a later time slice (split
   conformal on the score ``r - r_upper``, level ``(1 - alpha)(1 + 1/n)``), so that at most
   ``alpha`` (5 %) of the cluster's future jobs peak above it. Without any measured peak, the
   bound is ``U``.
4. A job fits a GPU type when its upper bound is at most the type's memory per device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import lightgbm as lgb
import numpy as np
import pandas as pd

from features.build import FEATURE_NAMES
from features.history import numeric_column, object_column
from models import memory_scalar  # noqa: F401 - registers analytic_memory's row-by-row path
from models.lgbm import BoosterParams, predict_booster, train_booster
from models.memory_analytic import MemoryParts

__all__ = ["UPPER_QUANTILE", "UNMEASURED_MARGIN", "SYNTHETIC_SOURCE_PREFIX", "MemoryEstimator", "memory_design",
           "fitting_types", "measured_peaks"]

UPPER_QUANTILE = 0.95
#: Bound over the estimate when a caller has no analytic upper bound to give (``predict`` without
#: ``prior_upper``); the analytic bound replaces it everywhere in this package.
UNMEASURED_MARGIN = 1.25
#: Rows whose ``source`` starts with this come from ``features.synth``: their peaks are our own
#: formula plus noise, and a correction fitted to them learns our assumptions.
SYNTHETIC_SOURCE_PREFIX = "synth"
_PEAK_KINDS = ("family", "request")
MEMORY_EXTRA_FEATURES: tuple[str, ...] = (
    "mem_log_analytic", "mem_log_states", "mem_log_activations", "mem_zero_stage", "mem_log_gpu_memory",
    *(f"mem_{k}_last_peak_vs_analytic" for k in _PEAK_KINDS),
    *(f"mem_{k}_log_gpus_vs_last" for k in _PEAK_KINDS),
    *(f"mem_{k}_log_tokens_vs_last" for k in _PEAK_KINDS),
)
_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}


def memory_design(X: np.ndarray, parts: MemoryParts, gpu_memory: np.ndarray) -> np.ndarray:
    """Job features plus the analytic components: the memory correction's input.

    Besides the analytic terms, the differences between this job and the latest measured run of
    its family / request signature (log peak vs this job's estimate, log GPUs, log batch x sequence)
    are given explicitly: the same job run again peaks where it peaked before, and trees split on
    a difference far more easily than they learn one.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        log_total = np.log(parts["total"])
        log_gpus = X[:, _COL["num_gpus"]].astype(float)
        log_gpus = np.log(np.where(log_gpus > 0, log_gpus, np.nan))
        tokens = X[:, _COL["log_tokens_per_step"]].astype(float)
        tokens = np.where(np.isfinite(tokens), tokens, X[:, _COL["log_batch_size"]].astype(float))
        extra = [np.log(parts["total"]), np.log(parts["states"]), np.log(np.maximum(parts["activations"], 1e-3)),
                 parts["zero_stage"], np.log(gpu_memory)]
        extra += [X[:, _COL[f"{k}_last_log_peak"]] - log_total for k in _PEAK_KINDS]
        extra += [log_gpus - X[:, _COL[f"{k}_log_last_peak_gpus"]] for k in _PEAK_KINDS]
        extra += [tokens - X[:, _COL[f"{k}_last_peak_log_tokens"]] for k in _PEAK_KINDS]
    return np.hstack([X, np.column_stack(extra).astype(X.dtype)])


def measured_peaks(jobs: pd.DataFrame, *, include_synthetic: bool = False) -> np.ndarray:
    """Peak memory labels the correction may learn from: measured ``peak_vram_mib``, NaN elsewhere.

    Out-of-memory runs are left out (their recorded peak is the GPU's capacity, a lower bound), and
    so are synthetic rows (``source`` starting with :data:`SYNTHETIC_SOURCE_PREFIX`) unless
    ``include_synthetic`` (tests of the code path).
    """
    peak = np.where(object_column(jobs, "state") == "OUT_OF_MEMORY", np.nan, numeric_column(jobs, "peak_vram_mib"))
    if not include_synthetic:
        synthetic = np.array([isinstance(s, str) and s.startswith(SYNTHETIC_SOURCE_PREFIX)
                              for s in object_column(jobs, "source")], dtype=bool)
        peak = np.where(synthetic, np.nan, peak)
    return peak


def fitting_types(upper_mib: np.ndarray, gpu_memory_mib: Mapping[str, float]) -> list[str]:
    """Rule *fits*: comma-separated GPU types whose memory per device holds each job's upper bound.

    The one definition of "which GPU types fit" (the service's predictions and the replay's both use
    it). Types are listed from the smallest memory to the largest (ties by name); a job whose bound
    exceeds every type gets ``""``; a job with no bound (unknown memory) fits every type: nothing says
    it does not.
    """
    names = sorted(gpu_memory_mib, key=lambda k: (gpu_memory_mib[k], k))
    caps = np.array([gpu_memory_mib[k] for k in names], dtype=float)
    suffixes = np.array([",".join(names[i:]) for i in range(len(names) + 1)], dtype=object)
    upper = np.asarray(upper_mib, dtype=float)
    first = np.searchsorted(caps, np.where(np.isfinite(upper), upper, -np.inf), side="left")
    return list(suffixes[first])


@dataclass
class MemoryEstimator:
    """Analytic estimate corrected by LightGBM where measured peaks exist.

    Parameters
    ----------
    params : BoosterParams
        Settings for the correction boosters.
    alpha : float, default 0.05
        Target share of jobs peaking above the upper bound.
    min_labelled : int, default 50
        Fewer measured jobs than this give a constant correction instead of boosters.
    max_rows : int, default 200_000
        Fit the boosters on at most this many of the most recent measured jobs.
    learn_from_synthetic : bool, default False
        Let ``models.fit`` pass synthetic peaks as labels (tests of the code path only).
    """

    params: BoosterParams = field(default_factory=lambda: BoosterParams(
        n_estimators=200, learning_rate=0.12, num_leaves=31, min_child_samples=20, bagging_fraction=0.6, max_bin=63))
    alpha: float = 0.05
    min_labelled: int = 50
    max_rows: int = 200_000
    learn_from_synthetic: bool = False

    def fit(self, Z: np.ndarray, analytic: np.ndarray, actual: np.ndarray, *, Z_cal: np.ndarray | None = None,
            analytic_cal: np.ndarray | None = None, actual_cal: np.ndarray | None = None,
            feature_names: list[str] | None = None, categorical: list[int] | None = None) -> MemoryEstimator:
        """Learn ``log(actual / analytic)`` from rows where both are known; calibrate the bound.

        Parameters
        ----------
        Z : ndarray of shape (n, d)
            ``memory_design`` output.
        analytic, actual : ndarray of shape (n,)
            Analytic estimate and measured peak (MiB); rows with either unknown are skipped.
        Z_cal, analytic_cal, actual_cal : optional
            A later time slice for the conformal shift.
        """
        ok = np.isfinite(analytic) & (analytic > 0) & np.isfinite(actual) & (actual > 0)
        self.n_labelled_ = int(ok.sum())
        self.median_booster_: lgb.Booster | None = None
        self.upper_booster_: lgb.Booster | None = None
        self.const_median_, self.const_upper_ = 0.0, -np.inf
        self.shift_, self.n_calibration_ = 0.0, 0
        if self.n_labelled_ == 0:
            return self
        r = np.log(actual[ok] / analytic[ok])
        self.const_median_ = float(np.median(r))
        self.const_upper_ = float(np.quantile(r, 1.0 - self.alpha))
        if self.n_labelled_ >= self.min_labelled:
            cats = categorical or []
            Z_fit, r_fit = Z[ok][-self.max_rows:], r[-self.max_rows:]
            self.median_booster_ = train_booster(Z_fit, r_fit, self.params, "quantile", alpha=0.5,
                                                 feature_names=feature_names, categorical=cats)
            self.upper_booster_ = train_booster(Z_fit, r_fit, self.params, "quantile", alpha=1.0 - self.alpha,
                                                feature_names=feature_names, categorical=cats)
        if Z_cal is not None and analytic_cal is not None and actual_cal is not None:
            ok_c = np.isfinite(analytic_cal) & (analytic_cal > 0) & np.isfinite(actual_cal) & (actual_cal > 0)
            n = int(ok_c.sum())
            if n >= 10:
                _, upper_r = self._corrections(Z_cal[ok_c])
                scores = np.log(actual_cal[ok_c] / analytic_cal[ok_c]) - upper_r
                self.shift_ = float(np.quantile(scores, min(1.0, (1.0 - self.alpha) * (1.0 + 1.0 / n))))
                self.n_calibration_ = n
        return self

    def _corrections(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.median_booster_ is None or self.upper_booster_ is None:
            return np.full(len(Z), self.const_median_), np.full(len(Z), self.const_upper_)
        med = predict_booster(self.median_booster_, Z)
        return med, np.maximum(predict_booster(self.upper_booster_, Z), med)

    def predict(self, Z: np.ndarray, analytic: np.ndarray,
                prior_upper: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Point estimate and upper bound (MiB) per job; NaN where the analytic estimate is unknown.

        ``prior_upper`` is the analytic upper bound (``MemoryParts["upper"]``); without it the
        bound of an estimator with no measured peaks is ``analytic * UNMEASURED_MARGIN``.
        """
        prior = analytic * UNMEASURED_MARGIN if prior_upper is None else np.maximum(prior_upper, analytic)
        if self.n_labelled_ == 0:
            return analytic.copy(), prior
        med, upper = self._corrections(Z)
        point = analytic * np.exp(med)
        bound = analytic * np.exp(np.maximum(upper + self.shift_, med))
        if self.median_booster_ is None:  # a constant correction from a few peaks: never below the prior's bound
            bound = np.maximum(bound, np.maximum(prior, point))
        return point, bound

    def feature_importance(self) -> np.ndarray | None:
        """Total gain per input of the median correction booster (None for a constant correction)."""
        return None if self.median_booster_ is None else self.median_booster_.feature_importance("gain")
