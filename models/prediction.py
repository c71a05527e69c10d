"""The Prediction contract: what the models say about one job, consumed by ``predictor``.

Batch form: a DataFrame with the columns in ``PREDICTION_COLUMNS`` (one row per job, same order as
the input), slowdown as one column per placement class (``slowdown_nvlink`` ...). Single form: the
frozen ``Prediction`` dataclass. ``Prediction.from_row`` / ``to_row`` convert between them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from features.schema import PLACEMENT_CLASSES

__all__ = ["Prediction", "PREDICTION_COLUMNS", "SLOWDOWN_COLUMNS", "slowdown_column"]


def slowdown_column(placement_class: str) -> str:
    return f"slowdown_{placement_class}"


SLOWDOWN_COLUMNS: tuple[str, ...] = tuple(slowdown_column(c) for c in PLACEMENT_CLASSES)

PREDICTION_COLUMNS: tuple[str, ...] = (
    "job_id",
    "duration_p10_s",
    "duration_p50_s",
    "duration_p90_s",
    "peak_vram_mib",  # point estimate per GPU
    "peak_vram_upper_mib",  # upper bound per GPU (what to reserve)
    "fits_gpu_types",  # comma-separated GPU types whose memory holds the upper bound
    *SLOWDOWN_COLUMNS,  # multiplicative slowdown vs. the best placement, >= 1, monotone
    "model_version",
    "fallback",  # True when a rules-only / analytic fallback produced this row
    "fallback_reason",
)


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predictions for one job.

    Attributes
    ----------
    duration_p10_s, duration_p50_s, duration_p90_s : float
        Run-time quantiles in seconds on the best placement; p10 <= p50 <= p90.
    peak_vram_mib, peak_vram_upper_mib : float or None
        Peak GPU memory per GPU (point, upper bound) in MiB; None when the job uses no GPU.
    fits_gpu_types : tuple of str
        GPU types whose memory holds ``peak_vram_upper_mib``.
    slowdown : mapping placement class -> float
        Predicted run-time multiplier per placement class, 1.0 for the best; never decreasing
        along ``PLACEMENT_CLASSES``.
    model_version : str
        Registered model version (e.g. ``job-predictor/3``) or ``fallback``.
    fallback : bool
        True when a model could not be used and the analytic / rules-only fallback answered.
    """

    job_id: str
    duration_p10_s: float
    duration_p50_s: float
    duration_p90_s: float
    peak_vram_mib: float | None
    peak_vram_upper_mib: float | None
    fits_gpu_types: tuple[str, ...]
    slowdown: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({c: 1.0 for c in PLACEMENT_CLASSES}))
    model_version: str = "fallback"
    fallback: bool = False
    fallback_reason: str | None = None

    def slowdown_for(self, placement_class: str) -> float:
        return float(self.slowdown.get(placement_class, 1.0))

    def to_row(self) -> dict:
        row = {
            "job_id": self.job_id,
            "duration_p10_s": self.duration_p10_s,
            "duration_p50_s": self.duration_p50_s,
            "duration_p90_s": self.duration_p90_s,
            "peak_vram_mib": self.peak_vram_mib,
            "peak_vram_upper_mib": self.peak_vram_upper_mib,
            "fits_gpu_types": ",".join(self.fits_gpu_types),
            "model_version": self.model_version,
            "fallback": self.fallback,
            "fallback_reason": self.fallback_reason,
        }
        for c in PLACEMENT_CLASSES:
            row[slowdown_column(c)] = self.slowdown_for(c)
        return row

    @classmethod
    def from_row(cls, row: Mapping) -> Prediction:
        def num(key: str) -> float | None:
            v = row.get(key)
            return None if v is None or v != v else float(v)  # NaN -> None

        fits = row.get("fits_gpu_types") or ""
        reason = row.get("fallback_reason")
        return cls(
            job_id=str(row["job_id"]),
            duration_p10_s=float(row["duration_p10_s"]),
            duration_p50_s=float(row["duration_p50_s"]),
            duration_p90_s=float(row["duration_p90_s"]),
            peak_vram_mib=num("peak_vram_mib"),
            peak_vram_upper_mib=num("peak_vram_upper_mib"),
            fits_gpu_types=tuple(t for t in str(fits).split(",") if t),
            slowdown=MappingProxyType({c: float(row.get(slowdown_column(c), 1.0)) for c in PLACEMENT_CLASSES}),
            model_version=str(row.get("model_version") or "fallback"),
            fallback=bool(row.get("fallback", False)),
            fallback_reason=None if reason is None or reason != reason else str(reason),
        )
