"""Factor ``shortness``: predicted GPU-time (p50 x GPUs x share), shorter scores higher.

``value = 1 - log(g / short) / log(long / short)`` clipped to [0, 1], with ``g`` the predicted
GPU-seconds and ``short``/``long`` from ``factors.shortness``: a log scale, because GPU-time spans
six orders of magnitude and what matters is "ten times shorter", not "ten minutes shorter". A job
without a prediction gets ``unknown_value``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from predictor.policy.config import PolicyConfig
from predictor.policy.context import CycleContext
from predictor.policy.factors.base import hours

__all__ = ["ShortnessFactor"]


class ShortnessFactor:
    name: ClassVar[str] = "shortness"

    def __init__(self, policy: PolicyConfig) -> None:
        cfg = policy.factors.shortness
        self.short, self.long, self.unknown = cfg.short_gpu_s, cfg.long_gpu_s, cfg.unknown_value
        self._span = np.log(self.long / self.short)

    def values(self, ctx: CycleContext) -> np.ndarray:
        g = ctx.gpu_seconds
        with np.errstate(divide="ignore", invalid="ignore"):
            v = 1.0 - np.log(np.maximum(g, 1e-9) / self.short) / self._span
        return np.where(np.isfinite(g), np.clip(v, 0.0, 1.0), self.unknown)

    def explain(self, ctx: CycleContext, i: int) -> str:
        return self.explain_rows(ctx, np.array([i]))[0]

    def explain_rows(self, ctx: CycleContext, rows: np.ndarray | slice) -> list[str]:
        p = ctx.pending
        out = []
        for g, milli, p50, n in zip(ctx.gpu_seconds[rows].tolist(), p.gpu_milli[rows].tolist(),
                                    p.p50_s[rows].tolist(), p.num_gpus[rows].tolist(), strict=True):
            if not math.isfinite(g):
                out.append("no duration prediction")
                continue
            share = "" if milli >= 1000 else f" x {milli / 1000:.2f}"
            out.append(f"predicted {g / 3600:.3g} GPU-h (p50 {hours(p50)} x {n} GPU{share})")
        return out
