"""The duration model's anchor: a point-in-time baseline the boosters correct, read from the feature row.

Trees cannot extrapolate. A booster that predicts log duration from history features answers, for
a user whose recent jobs run longer than anything in the training window, the edge of what it saw;
"the mean of the user's last two jobs" follows the user. So the boosters learn the *residual* of
log duration against an anchor, ``log d - anchor``, and the prediction is ``anchor + booster(x)``:
where the features say nothing more, the model falls back on the anchor instead of on a global
average, and it moves with the user.

Anchor chains (``ANCHOR_CHAINS``): each is a list of feature columns (absolute log seconds) read in
order, the first finite one per job, else the job's offset (its time limit, else the global median:
``models.bundle.duration_offset``). ``choose_anchor`` keeps the chain with the lowest mean
absolute log error on the training rows (point in time, so that is an honest choice): the best
starting point for the boosters, and for the mode-seeking point above all. (``DurationEstimator``
can instead score a quick booster per chain on the calibration slice, ``anchor_on_calibration``;
off by default, see there.)

The boosters also see each baseline *relative to the anchor* (``AnchoredDesign.design``): a split on
"the user's mean is 1.5 log units above their last two" is what shrinking a noisy anchor takes, and
trees do not form differences of columns by themselves.

Everything here is in the estimator's target space, ``log d - offset``.

Scoring reads everything at once (``AnchoredDesign.parts`` and ``design_from``): the column
positions are looked up once per design (cached on it, not pickled) and the baselines are one
matrix, so a request of one row costs a few numpy calls instead of one per column and baseline; the
values are those of ``offset`` / ``baselines`` / ``anchor`` / ``design`` (same operations per
element, tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["ANCHOR_CHAINS", "BASELINE_COLUMNS", "AnchoredDesign", "choose_anchor"]

#: Baselines as feature columns (absolute log seconds), the names ``models.baselines`` uses.
BASELINE_COLUMNS: dict[str, str] = {
    "user_last2": "user_log_last2_d",
    "user_mean": "user_log_mean_d",
    "user_recent": "user_recent_logd",
    "request_recent": "request_recent_logd",
    "request_last2": "request_log_last2_d",
    "family_recent": "family_recent_logd",
    "requested_time": "log_time_limit_s",
}
#: Candidate anchors, each a chain of ``BASELINE_COLUMNS`` keys (the job's offset closes every chain).
ANCHOR_CHAINS: dict[str, tuple[str, ...]] = {
    "offset": (),
    "user_last2": ("user_last2",),
    "user_recent": ("user_recent",),
    "request_then_user_recent": ("request_recent", "user_recent"),
    "request_then_user_last2": ("request_last2", "user_last2"),
    "family_then_user_recent": ("family_recent", "user_recent"),
}
_LIMIT = "log_time_limit_s"


@dataclass(frozen=True)
class AnchoredDesign:
    """Reads baselines, offsets and the anchor from feature rows (``names`` is their column order)."""

    names: tuple[str, ...]
    log_global_median: float
    chain: tuple[str, ...] = ()

    def _col(self, X: np.ndarray, name: str) -> np.ndarray:
        return X[:, self.names.index(name)].astype(np.float64)

    @cached_property
    def positions(self) -> _Positions:
        """Column positions in ``names`` (looked up once; ``__getstate__`` leaves them out of pickles)."""
        index = {name: i for i, name in enumerate(self.names)}
        available = self.available
        return _Positions(
            limit=index.get(_LIMIT, -1),
            baselines=np.array([index[BASELINE_COLUMNS[b]] for b in available], dtype=np.intp),
            chain=tuple(available.index(b) for b in self.chain if BASELINE_COLUMNS[b] in index),
            index=index,
            available=available,
        )

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("positions", None)
        return state

    def parts(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(offset, limit, baselines, anchor)`` for feature rows ``X`` in one pass: ``offset(X)``; the
        limit column (float64, NaN without one); every available baseline in target space as one matrix
        (n, len(available)), column ``j`` equal to ``baseline(X, available[j])``; ``anchor(X)``."""
        pos = self.positions
        n = len(X)
        if pos.limit >= 0:
            limit = X[:, pos.limit].astype(np.float64)
            off = np.where(np.isfinite(limit), limit, self.log_global_median)
        else:
            limit = np.full(n, np.nan)
            off = np.full(n, self.log_global_median)
        base = X[:, pos.baselines].astype(np.float64) - off[:, None]
        out = np.full(n, np.nan)
        for j in pos.chain:
            out = np.where(np.isfinite(out), out, base[:, j])
        return off, limit, base, np.where(np.isfinite(out), out, 0.0)

    def design_from(self, X: np.ndarray, base: np.ndarray, anchor: np.ndarray) -> np.ndarray:
        """``design(X)`` from ``parts``' baselines and anchor (no column looked up again)."""
        d, k = X.shape[1], base.shape[1]
        out = np.empty((len(X), d + k + 1), dtype=np.float32)
        out[:, :d] = X
        out[:, d:d + k] = base - anchor[:, None]
        out[:, d + k] = anchor
        return out

    @property
    def available(self) -> tuple[str, ...]:
        """The baselines whose columns the feature row has."""
        return tuple(b for b, c in BASELINE_COLUMNS.items() if c in self.names)

    def offset(self, X: np.ndarray) -> np.ndarray:
        """log of the time limit where there is one, else of the global median (absolute log seconds)."""
        if _LIMIT not in self.names:
            return np.full(len(X), self.log_global_median)
        limit = self._col(X, _LIMIT)
        return np.where(np.isfinite(limit), limit, self.log_global_median)

    def baseline(self, X: np.ndarray, name: str) -> np.ndarray:
        """One baseline in target space; NaN where it has nothing to say."""
        return self._col(X, BASELINE_COLUMNS[name]) - self.offset(X)

    def baselines(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """Every available baseline in target space, NaN where it has nothing to say; ``offset`` (0)
        only where the job has a time limit (elsewhere it is the global median, a constant)."""
        out = {name: self.baseline(X, name) for name in self.available if name != "requested_time"}
        limit = self._col(X, _LIMIT) if _LIMIT in self.names else np.full(len(X), np.nan)
        out["offset"] = np.where(np.isfinite(limit), 0.0, np.nan)
        return out

    def anchor(self, X: np.ndarray, chain: tuple[str, ...] | None = None) -> np.ndarray:
        """The first finite baseline of the chain per job, else 0 (the offset), in target space."""
        out = np.full(len(X), np.nan)
        for name in self.chain if chain is None else chain:
            if BASELINE_COLUMNS[name] in self.names:
                b = self.baseline(X, name)
                out = np.where(np.isfinite(out), out, b)
        return np.where(np.isfinite(out), out, 0.0)

    def design(self, X: np.ndarray) -> np.ndarray:
        """The booster's input: the features, each baseline minus the anchor, and the anchor itself."""
        a = self.anchor(X)
        extra = [self.baseline(X, name) - a for name in self.available]
        return np.column_stack([X, *extra, a]).astype(np.float32)

    def design_names(self) -> list[str]:
        return [*self.names, *(f"{b}_vs_anchor" for b in self.available), "anchor"]


@dataclass(frozen=True)
class _Positions:
    """Where ``AnchoredDesign.parts`` reads: the limit column (-1: none), each available baseline's
    column, the chain as positions among the available baselines, every name's column, and
    ``AnchoredDesign.available``."""

    limit: int
    baselines: np.ndarray
    chain: tuple[int, ...]
    index: dict[str, int]
    available: tuple[str, ...]


def choose_anchor(X: np.ndarray, y: np.ndarray, exact: np.ndarray, names: tuple[str, ...],
                  log_global_median: float) -> tuple[AnchoredDesign, dict[str, float]]:
    """The chain with the lowest mean |y - anchor| on the uncensored rows, and each chain's error."""
    base = AnchoredDesign(names, log_global_median)
    errors = {}
    for label, chain in ANCHOR_CHAINS.items():
        if any(BASELINE_COLUMNS[c] not in names for c in chain):
            continue
        errors[label] = float(np.mean(np.abs(y[exact] - base.anchor(X[exact], chain)))) if exact.any() else np.inf
    best = min(errors, key=errors.get)
    return AnchoredDesign(names, log_global_median, ANCHOR_CHAINS[best]), errors
