"""Run-time quantiles: LightGBM quantile regression on log duration, censoring-aware, conformalised.

Model
    Three LightGBM boosters with the pinball (quantile) loss on ``log(duration_s)`` at
    ``QUANTILES`` = 0.1, 0.5, 0.9. Given feature names with the history columns and the global
    median (``models.fit`` passes both), the model is **anchored**: the boosters learn the residual
    against a point-in-time baseline (``models.duration_anchor``: trees cannot extrapolate, the
    anchor follows a user whose jobs leave the training range), a fourth booster with the Welsch
    loss (``MODE_SCALE``) gives a mode-seeking point, and the calibration slice chooses per segment
    the point (model or a baseline) and the interval (model or the user's empirical range), each
    conformalised (``models.duration_segments``). Without them: the plain boosters, one CQR pair.

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
    Anchored model: per segment, see ``models.duration_segments``. Plain model: on a later time slice the model did not train on, asymmetric CQR scores
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

from models.duration_anchor import ANCHOR_CHAINS, BASELINE_COLUMNS, AnchoredDesign, choose_anchor
from models.duration_segments import SegmentPlan, conformal_shift, point_score, segment_ids
from models.lgbm import BoosterParams, predict_booster, train_booster, welsch_objective

__all__ = ["QUANTILES", "CENSORED_DRAWS", "DurationEstimator", "impute_censored"]

QUANTILES: tuple[float, float, float] = (0.1, 0.5, 0.9)
CENSORED_DRAWS = 3
_SPAN = 2.0 * 1.2815515655446004  # z(0.9) - z(0.1)
#: Scale (log units) of the Welsch loss of the mode-seeking point booster: about a factor of 2.
MODE_SCALE = 1.0
#: The point snaps to the user's latest run time when it is within this factor of it (log 1.5):
#: jobs that repeat, repeat exactly, and the median absolute error in seconds rewards exact hits.
#: KTH without limits: median AE 785 -> 580 s (user last-2: 758 s), mean |log ratio| 1.286 ->
#: 1.284, within 2x 0.526 -> 0.521; KTH with one user dominating: 1,316 -> 446 s (578 s), 1.117 ->
#: 1.084, 0.678 -> 0.678 (the later period of each log; tolerance picked there, 0.2-1.0 tried).
SNAP_LOG = float(np.log(1.5))


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
    refit_points : bool, default True
        With the anchored model: after the calibration slice has made its choices, refit the point
        boosters (not the q10 / q90 ones) on train + calibration (``_refit_points``).
    anchor_on_calibration : bool, default False
        Choose the anchor by quick boosters scored on the calibration slice instead of by the raw
        anchor's error on the training rows. Off: on HPC2N without limits it chose the global
        median (the plain model, which cannot follow a user), and within 2x fell from 0.43 to 0.39.
    max_rows : int, default 250_000
        Fit on at most this many of the most recent rows (long histories: recent behaviour matters
        most, and it bounds training time).
    """

    params: BoosterParams = field(default_factory=BoosterParams)
    coverage: float = 0.8
    censoring_rounds: int = 1
    refit_on_calibration: bool = False
    refit_points: bool = True
    anchor_on_calibration: bool = False
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
        global_median_s: float | None = None,
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
        global_median_s : float, optional
            The training jobs' median run time. With ``feature_names`` holding the baseline columns
            (``models.duration_anchor``) it turns on the anchored model and the per-segment choices
            (``models.duration_segments``); without, plain quantile boosters with one CQR shift pair.
        """
        cats = categorical or []
        weight = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        self.design_: AnchoredDesign | None = None
        self.plan_: SegmentPlan | None = None
        self.anchor_errors_: dict[str, float] = {}
        names = feature_names
        if feature_names is not None and global_median_s is not None and "user_n" in feature_names:
            log_gm = float(np.log(max(global_median_s, 1.0)))
            self.design_, self.anchor_errors_ = choose_anchor(X, log_duration, ~censored, tuple(feature_names), log_gm)
            if self.anchor_on_calibration and X_cal is not None and log_duration_cal is not None:
                exact_cal = np.ones(len(X_cal), bool) if censored_cal is None else ~censored_cal
                if exact_cal.sum() >= 10:
                    self._anchor_on_calibration(X[~censored], log_duration[~censored], weight[~censored],
                                                X_cal[exact_cal], log_duration_cal[exact_cal], cats)
            names = self.design_.design_names()
            exact = ~censored
            absolute = log_duration[exact] + self.design_.offset(X[exact])
            self.log_global_range_ = tuple(np.quantile(absolute, (0.1, 0.9))) if exact.any() else (0.0, 0.0)
        self.empirical_shift_ = 0.0
        Xd, y = self._design(X), log_duration - self._anchor(X)
        self.boosters_ = self._fit_censored(Xd, y, censored, weight, names, cats)
        self.mode_booster_: lgb.Booster | None = None
        if self.design_ is not None and (~censored).sum() >= 20:
            self.mode_booster_ = self._fit_mode(Xd[~censored], y[~censored], weight[~censored], names, cats)
        self.shift_lo_, self.shift_hi_, self.n_calibration_ = 0.0, 0.0, 0
        if X_cal is not None and log_duration_cal is not None and len(X_cal):
            cens_cal = np.zeros(len(X_cal), bool) if censored_cal is None else censored_cal
            exact = ~cens_cal
            if int(exact.sum()) >= 10:
                self._calibrate(X_cal[exact], log_duration_cal[exact])
                if self.refit_points and self.design_ is not None and not self.refit_on_calibration:
                    self._refit_points(np.vstack([Xd[~censored], self._design(X_cal[exact])]),
                                       np.r_[y[~censored], log_duration_cal[exact] - self._anchor(X_cal[exact])],
                                       np.r_[weight[~censored], np.ones(int(exact.sum()))], names, cats,
                                       median=not censored.any())
            if self.refit_on_calibration:
                self.boosters_ = self._fit_censored(
                    np.vstack([Xd, self._design(X_cal)]), np.r_[y, log_duration_cal - self._anchor(X_cal)],
                    np.r_[censored, cens_cal], np.r_[weight, np.ones(len(X_cal))], names, cats,
                    start=self.boosters_, rounds=min(1, self.censoring_rounds),
                )
        return self

    def _fit_mode(self, Xd, y, w, names, cats) -> lgb.Booster:  # noqa: ANN001
        """The mode-seeking point booster (Welsch loss, twice the rounds and leaves) on complete runs."""
        keep = slice(max(0, len(Xd) - self.max_rows), len(Xd))
        mode_params = replace(self.params, n_estimators=2 * self.params.n_estimators,
                              num_leaves=2 * self.params.num_leaves + 1,
                              min_child_samples=max(20, self.params.min_child_samples // 2))
        return train_booster(Xd[keep], y[keep], mode_params, welsch_objective(MODE_SCALE), weight=w[keep],
                             feature_names=names, categorical=cats)

    def _refit_points(self, Xd, y, w, names, cats, *, median: bool) -> None:  # noqa: ANN001
        """Refit the point boosters (mode; median when no run is censored) on train + calibration.

        The segment choices were made with the boosters that had not seen the slice; the refitted
        ones know the most recent jobs. The q10 / q90 boosters are not refitted, so the interval's
        split-conformal calibration stays valid.
        """
        self.mode_booster_ = self._fit_mode(Xd, y, w, names, cats)
        if median:
            keep = slice(max(0, len(Xd) - self.max_rows), len(Xd))
            self.boosters_[1] = train_booster(Xd[keep], y[keep], self.params, "quantile", alpha=0.5, weight=w[keep],
                                              feature_names=names, categorical=cats)

    def _anchor_on_calibration(self, X, y, w, X_cal, y_cal, cats) -> None:  # noqa: ANN001
        """Keep the anchor chain whose quick median booster scores best (``point_score``) on the slice."""
        base = self.design_
        assert base is not None
        quick = replace(self.params, n_estimators=max(20, self.params.n_estimators // 4),
                        learning_rate=min(0.3, 2.0 * self.params.learning_rate))
        keep = slice(max(0, len(X) - self.max_rows), len(X))
        X, y, w = X[keep], y[keep], w[keep]
        scores = {}
        for label, chain in ANCHOR_CHAINS.items():
            if any(BASELINE_COLUMNS[c] not in base.names for c in chain):
                continue
            d = AnchoredDesign(base.names, base.log_global_median, chain)
            booster = train_booster(d.design(X), y - d.anchor(X), quick, "quantile", alpha=0.5, weight=w,
                                    feature_names=d.design_names(), categorical=cats)
            scores[label] = point_score(predict_booster(booster, d.design(X_cal)) + d.anchor(X_cal), y_cal,
                                        d.offset(X_cal))
        best = min(scores, key=scores.get)
        self.design_ = AnchoredDesign(base.names, base.log_global_median, ANCHOR_CHAINS[best])
        self.anchor_errors_ = {f"calibration_score/{k}": v for k, v in scores.items()}

    def _design(self, X: np.ndarray) -> np.ndarray:
        return X if self.design_ is None else self.design_.design(X)

    def _anchor(self, X: np.ndarray) -> np.ndarray:
        return np.zeros(len(X)) if self.design_ is None else self.design_.anchor(X)

    def _model_quantiles(self, X: np.ndarray) -> np.ndarray:
        """The boosters' quantiles in target space (anchor added), before calibration."""
        return self._raw_predict(self.boosters_, self._design(X)) + self._anchor(X)[:, None]

    def _segment_inputs(self, X: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Segment ids, baselines and the user's empirical interval (target space) for ``X``."""
        d = self.design_
        assert d is not None
        names = d.names
        has_limit = X[:, names.index("has_time_limit")] > 0 if "has_time_limit" in names else np.zeros(len(X), bool)
        spread = (X[:, names.index("user_recent_q90_logd")] - X[:, names.index("user_recent_q10_logd")]
                  if "user_recent_q90_logd" in names else None)
        seg = segment_ids(X[:, names.index("user_n")], has_limit, spread)
        empirical = self._empirical(X)
        candidates = d.baselines(X)
        if self.mode_booster_ is not None:
            candidates["model_mode"] = predict_booster(self.mode_booster_, self._design(X)) + self._anchor(X)
        return seg, candidates, empirical

    def _empirical(self, X: np.ndarray) -> np.ndarray:
        """The user's empirical 10-90 % interval of their latest runs (target space), shape (n, 2).

        A user without runs in the window gets the training period's 10-90 % range of all jobs.
        """
        d = self.design_
        assert d is not None
        out = np.empty((len(X), 2))
        for j, col in enumerate(("user_recent_q10_logd", "user_recent_q90_logd")):
            v = X[:, d.names.index(col)].astype(np.float64) if col in d.names else np.full(len(X), np.nan)
            out[:, j] = np.where(np.isfinite(v), v, self.log_global_range_[j]) - d.offset(X)
        return out

    def empirical_interval_log(self, X: np.ndarray) -> np.ndarray:
        """The per-user empirical interval baseline, conformalised on the calibration slice as a whole
        (one shift), in the target space of ``predict_log``: shape (n, 2). NaN without the anchored model."""
        if self.design_ is None:
            return np.full((len(X), 2), np.nan)
        emp = self._empirical(X)
        return np.column_stack([emp[:, 0] - self.empirical_shift_, emp[:, 1] + self.empirical_shift_])

    def _calibrate(self, X: np.ndarray, y: np.ndarray) -> None:
        q = self._model_quantiles(X)
        self.n_calibration_ = len(y)
        if self.design_ is None:  # asymmetric CQR, one shift per side at level 1 - alpha / 2
            level = min(1.0, (1.0 - (1.0 - self.coverage) / 2.0) * (1.0 + 1.0 / len(y)))
            self.shift_lo_ = float(np.quantile(q[:, 0] - y, level))
            self.shift_hi_ = float(np.quantile(y - q[:, 2], level))
            return
        seg, baselines, empirical = self._segment_inputs(X)
        self.plan_ = SegmentPlan(coverage=self.coverage).fit(seg, y, q, baselines, empirical, self.design_.offset(X))
        self.empirical_shift_ = conformal_shift(empirical[:, 0], empirical[:, 1], y, self.coverage)
        self.shift_lo_ = self.shift_hi_ = conformal_shift(q[:, 0], q[:, 2], y, self.coverage)

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        """Calibrated, non-crossing log-duration quantiles, shape (n, 3)."""
        if self.plan_ is None:
            q = self._model_quantiles(X)
            q[:, 0] -= self.shift_lo_
            q[:, 2] += self.shift_hi_
            return np.sort(q, axis=1)
        return self._predict_anchored(X)

    def _predict_anchored(self, X: np.ndarray) -> np.ndarray:
        """``predict_log`` of the anchored model: the steps of ``_model_quantiles``, ``_segment_inputs``,
        ``SegmentPlan.apply`` and the snap to the user's latest run, with the offset, baselines, anchor
        and booster input computed once (``AnchoredDesign.parts``) and each booster called on the same
        float64 matrix (the float32 design, widened once: exact)."""
        d = self.design_
        assert d is not None and self.plan_ is not None
        pos = d.positions
        index = pos.index
        n = len(X)
        off, limit, base, anchor = d.parts(X)
        Xd = d.design_from(X, base, anchor).astype(np.float64)
        raw = np.empty((n, len(self.boosters_)))
        for j, booster in enumerate(self.boosters_):
            raw[:, j] = predict_booster(booster, Xd)
        raw.sort(axis=1)
        q = raw + anchor[:, None]
        i_has = index.get("has_time_limit")
        has_limit = X[:, i_has] > 0 if i_has is not None else np.zeros(n, bool)
        i_lo, i_hi = index.get("user_recent_q10_logd"), index.get("user_recent_q90_logd")
        spread = X[:, i_hi] - X[:, i_lo] if i_hi is not None else None
        seg = segment_ids(X[:, index["user_n"]], has_limit, spread)
        empirical = self._empirical_from(X, off)
        candidates = {name: base[:, j] for j, name in enumerate(pos.available) if name != "requested_time"}
        candidates["offset"] = np.where(np.isfinite(limit), 0.0, np.nan)
        if self.mode_booster_ is not None:
            candidates["model_mode"] = predict_booster(self.mode_booster_, Xd) + anchor
        out = self.plan_.apply(seg, q, candidates, empirical)
        i_last1 = index.get("user_last1_logd")
        if i_last1 is not None:
            last1 = X[:, i_last1].astype(np.float64) - off
            near = np.isfinite(last1) & (np.abs(out[:, 1] - last1) < SNAP_LOG)
            out[:, 1] = np.clip(np.where(near, last1, out[:, 1]), out[:, 0], out[:, 2])
        return out

    def _empirical_from(self, X: np.ndarray, off: np.ndarray) -> np.ndarray:
        """``_empirical(X)`` given ``offset(X)``."""
        index = self.design_.positions.index  # type: ignore[union-attr]
        cols = [index.get("user_recent_q10_logd"), index.get("user_recent_q90_logd")]
        if None in cols:
            return self._empirical(X)
        v = X[:, cols].astype(np.float64)
        return np.where(np.isfinite(v), v, np.asarray(self.log_global_range_, dtype=np.float64)) - off[:, None]

    def booster_inputs(self, X: np.ndarray) -> list[tuple[lgb.Booster, np.ndarray]]:
        """Every booster with the matrix it predicts on for feature rows ``X`` (latency benchmarks)."""
        Xd = self._design(X)
        return [(b, Xd) for b in [*self.boosters_, *([self.mode_booster_] if self.mode_booster_ is not None else [])]]

    def feature_importance(self) -> np.ndarray:
        """Total gain per input feature of the p50 booster (the anchor-relative columns not included)."""
        gain = self.boosters_[1].feature_importance(importance_type="gain")
        return gain if self.design_ is None else gain[: len(self.design_.names)]
