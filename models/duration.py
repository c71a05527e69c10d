"""Run-time quantiles: LightGBM quantile regression on log duration, censoring-aware, conformalised.

Model
    Three LightGBM boosters with the pinball (quantile) loss on ``log(duration_s)`` at
    ``QUANTILES`` = 0.1, 0.5, 0.9.

Censored jobs (right-censoring: still running when the log ended)
    A censored job's observed run time ``L`` is a lower bound, so it is neither dropped (that biases
    every quantile down: the long jobs are the ones still running) nor used as if it had ended at
    ``L`` (same bias, smaller). We use **iterative stratified imputation from the conditional
    distribution above the bound**: fit on the uncensored jobs; for each censored job read the
    model's predictive distribution in log space as a normal with ``mu = q50`` and
    ``sigma = (q90 - q10) / 2.563`` (the 10-90 % span of a normal); replace the job by
    ``CENSORED_DRAWS`` pseudo-observations at the conditional quantiles ``u = 1/6, 1/2, 5/6`` of
    that normal *truncated to [log L, inf)*, each with weight ``1 / CENSORED_DRAWS``; refit; repeat
    ``censoring_rounds`` times (default once). Only the last fit uses the full boosting rounds; the
    models that impute are quick ones (a quarter of the rounds at twice the learning rate). Every imputed value is ``>= L``, and a job whose bound is far above
    the model's belief gets values just above its bound. (Akin to the EM / "Buckley-James"
    treatment of censored regression, with the quantile models supplying the conditional law.)

Non-crossing
    Predicted quantiles are sorted per row (monotone rearrangement, Chernozhukov, Fernandez-Val &
    Galichon, 2010), which can only reduce pinball loss.

Calibration (conformalised quantile regression, Romano, Patterson & Candes, NeurIPS 2019)
    On a later time slice the model did not train on, asymmetric CQR scores
    ``E_lo = q10 - y`` and ``E_hi = y - q90`` give shifts at level ``(1 - alpha/2)(1 + 1/n)``,
    ``alpha = 1 - coverage``; the interval ``[q10 - s_lo, q90 + s_hi]`` then covers ``coverage`` of
    exchangeable future jobs. Only uncensored calibration jobs are scored. With
    ``refit_on_calibration`` the boosters are refitted on train + calibration (same settings) after
    the shifts are computed, so the most recent jobs inform the model; the shifts are kept (off by
    default: on the SWF logs it did not help, and it voids the split-conformal guarantee).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import lightgbm as lgb
import numpy as np
from scipy.special import ndtr, ndtri

from models.lgbm import BoosterParams, predict_booster, train_booster

__all__ = ["QUANTILES", "CENSORED_DRAWS", "DurationEstimator", "impute_censored"]

QUANTILES: tuple[float, float, float] = (0.1, 0.5, 0.9)
CENSORED_DRAWS = 3
_SPAN = 2.0 * 1.2815515655446004  # z(0.9) - z(0.1)


def impute_censored(log_bound: np.ndarray, log_quantiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pseudo-observations for censored jobs from the truncated conditional distribution.

    Parameters
    ----------
    log_bound : ndarray of shape (m,)
        log of each censored job's observed run time (the lower bound).
    log_quantiles : ndarray of shape (m, 3)
        The model's predicted log-duration quantiles (0.1, 0.5, 0.9) for those jobs.

    Returns
    -------
    values : ndarray of shape (m * CENSORED_DRAWS,)
        Imputed log durations, each >= its job's bound; job ``i``'s draws are rows
        ``i * CENSORED_DRAWS ...``.
    weights : ndarray of shape (m * CENSORED_DRAWS,)
        ``1 / CENSORED_DRAWS`` each.
    """
    mu = log_quantiles[:, 1]
    sigma = np.maximum((log_quantiles[:, 2] - log_quantiles[:, 0]) / _SPAN, 0.05)
    below = ndtr((log_bound - mu) / sigma)  # P(Y < bound) under the model
    u = (np.arange(CENSORED_DRAWS) + 0.5) / CENSORED_DRAWS  # 1/6, 1/2, 5/6
    v = below[:, None] + u[None, :] * (1.0 - below[:, None])
    z = ndtri(np.clip(v, 1e-12, 1.0 - 1e-12))
    values = np.maximum(mu[:, None] + sigma[:, None] * z, log_bound[:, None])
    return values.ravel(), np.full(values.size, 1.0 / CENSORED_DRAWS)


@dataclass
class DurationEstimator:
    """p10/p50/p90 of log duration with censoring-aware fitting and CQR calibration.

    Parameters
    ----------
    params : BoosterParams
        LightGBM settings for the three boosters.
    coverage : float, default 0.8
        Target coverage of the p10-p90 interval after calibration.
    censoring_rounds : int, default 1
        Imputation rounds for censored jobs (0: censored jobs are dropped).
    refit_on_calibration : bool, default False
        Refit on train + calibration after computing the conformal shifts (censored rows imputed
        once more by the calibrated-on model, no further rounds). Off by default: split conformal
        coverage holds exactly only for a model that never saw the calibration slice.
    max_rows : int, default 250_000
        Fit on at most this many of the most recent rows (long histories: recent behaviour matters
        most, and it bounds training time).
    """

    params: BoosterParams = field(default_factory=BoosterParams)
    coverage: float = 0.8
    censoring_rounds: int = 1
    refit_on_calibration: bool = False
    max_rows: int = 250_000

    def _fit_boosters(self, X: np.ndarray, y: np.ndarray, w: np.ndarray, names, cats, *,
                      preliminary: bool = False) -> list[lgb.Booster]:
        params = self.params
        if preliminary:  # imputation models: a quarter of the rounds at twice the rate
            params = replace(params, n_estimators=max(20, params.n_estimators // 4),
                             learning_rate=min(0.3, 2.0 * params.learning_rate))
        return [
            train_booster(X, y, params, "quantile", alpha=q, weight=w, feature_names=names, categorical=cats)
            for q in QUANTILES
        ]

    def _fit_censored(self, X, y, censored, weight, names, cats, *, start: list[lgb.Booster] | None = None,
                      rounds: int | None = None) -> list[lgb.Booster]:
        """Fit with censored rows imputed ``rounds`` times, starting from ``start`` boosters if given."""
        if len(X) > self.max_rows:
            X, y, censored, weight = X[-self.max_rows:], y[-self.max_rows:], censored[-self.max_rows:], weight[-self.max_rows:]
        exact = ~censored
        rounds = self.censoring_rounds if rounds is None else rounds
        if not censored.any() or rounds <= 0:
            return self._fit_boosters(X[exact], y[exact], weight[exact], names, cats)
        boosters = start if start is not None else self._fit_boosters(X[exact], y[exact], weight[exact], names, cats,
                                                                       preliminary=True)
        Xc, bound = X[censored], y[censored]
        Xc_rep = np.repeat(Xc, CENSORED_DRAWS, axis=0)
        for round_no in range(rounds):
            quant = self._raw_predict(boosters, Xc)
            imputed, draw_weights = impute_censored(bound, quant)
            boosters = self._fit_boosters(
                np.vstack([X[exact], Xc_rep]), np.r_[y[exact], imputed],
                np.r_[weight[exact], draw_weights * np.repeat(weight[censored], CENSORED_DRAWS)],
                names, cats, preliminary=round_no < rounds - 1,
            )
        return boosters

    @staticmethod
    def _raw_predict(boosters: list[lgb.Booster], X: np.ndarray) -> np.ndarray:
        return np.sort(np.column_stack([predict_booster(b, X) for b in boosters]), axis=1)

    def fit(
        self,
        X: np.ndarray,
        log_duration: np.ndarray,
        censored: np.ndarray,
        *,
        X_cal: np.ndarray | None = None,
        log_duration_cal: np.ndarray | None = None,
        censored_cal: np.ndarray | None = None,
        feature_names: list[str] | None = None,
        categorical: list[int] | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> DurationEstimator:
        """Fit on (``X``, ``log_duration``); calibrate on the ``*_cal`` slice when given.

        Parameters
        ----------
        X : ndarray of shape (n, d)
        log_duration : ndarray of shape (n,)
            log of the run time; for censored rows the log of the observed lower bound.
        censored : ndarray of bool, shape (n,)
        X_cal, log_duration_cal, censored_cal : optional
            A later time slice for conformal calibration (same layout).
        sample_weight : ndarray of shape (n,), optional
            Row weights for the training rows (calibration rows weigh 1 in a refit).
        """
        cats = categorical or []
        weight = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        self.boosters_ = self._fit_censored(X, log_duration, censored, weight, feature_names, cats)
        self.shift_lo_, self.shift_hi_, self.n_calibration_ = 0.0, 0.0, 0
        if X_cal is not None and log_duration_cal is not None and len(X_cal):
            cens_cal = np.zeros(len(X_cal), bool) if censored_cal is None else censored_cal
            exact = ~cens_cal
            q = self._raw_predict(self.boosters_, X_cal[exact])
            y = log_duration_cal[exact]
            n = len(y)
            if n >= 10:
                level = min(1.0, (1.0 - (1.0 - self.coverage) / 2.0) * (1.0 + 1.0 / n))
                self.shift_lo_ = float(np.quantile(q[:, 0] - y, level))
                self.shift_hi_ = float(np.quantile(y - q[:, 2], level))
                self.n_calibration_ = n
            if self.refit_on_calibration:
                self.boosters_ = self._fit_censored(
                    np.vstack([X, X_cal]), np.r_[log_duration, log_duration_cal], np.r_[censored, cens_cal],
                    np.r_[weight, np.ones(len(X_cal))], feature_names, cats, start=self.boosters_,
                    rounds=min(1, self.censoring_rounds),
                )
        return self

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        """Calibrated, non-crossing log-duration quantiles, shape (n, 3)."""
        q = self._raw_predict(self.boosters_, X)
        q[:, 0] -= self.shift_lo_
        q[:, 2] += self.shift_hi_
        return np.sort(q, axis=1)

    def feature_importance(self) -> np.ndarray:
        """Total gain per feature of the p50 booster."""
        return self.boosters_[1].feature_importance(importance_type="gain")
