"""Rule *chosen point*: which point of the Pareto front becomes ``policy.yaml``.

Among the points of the front, keep those whose ``max_wait_s``, ``sla_misses`` and ``jain_index``
on the tuning window are no worse than QSSF's on the same window (``max_wait_s`` and
``sla_misses`` at most QSSF's, ``jain_index`` at least QSSF's); choose the one with the lowest
``avg_jct_s`` (ties: the earlier trial).

When no point qualifies, the chosen point is the one whose worst relative shortfall against QSSF
over those three metrics is smallest (shortfall of max wait: (w - w_qssf) / w_qssf; of SLA misses:
(m - m_qssf) / max(m_qssf, 1); of Jain's index: (j_qssf - j) / j_qssf; ties: the lower average
JCT). The rule string then says so, the command prints a warning, and the validation table shows
how far from QSSF the chosen policy is: no policy is claimed to match QSSF when none did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from predictor.tune.objectives import no_worse

__all__ = ["GUARDS", "Choice", "choose"]

#: The metrics the chosen point must not lose on against QSSF.
GUARDS: tuple[str, ...] = ("max_wait_s", "sla_misses", "jain_index")

Metrics = Mapping[str, float | None]


@dataclass(frozen=True)
class Choice:
    """The chosen front point: its index in the front, the rule as printed, whether it qualified."""

    index: int
    rule: str
    qualified: bool


def _num(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _shortfall(point: Metrics, qssf: Metrics) -> float:
    worst = 0.0
    for metric in GUARDS:
        v, q = _num(point.get(metric)), _num(qssf.get(metric))
        if not math.isfinite(q):
            continue
        if not math.isfinite(v):
            return math.inf
        if metric == "jain_index":
            gap = (q - v) / q if q > 0 else 0.0
        elif metric == "sla_misses":
            gap = (v - q) / max(q, 1.0)
        else:
            gap = (v - q) / q if q > 0 else (math.inf if v > q else 0.0)
        worst = max(worst, gap)
    return worst


def _jct(point: Metrics) -> float:
    v = _num(point.get("avg_jct_s"))
    return v if math.isfinite(v) else math.inf


def _fmt(v: float | None) -> str:
    return "undefined" if v is None or not math.isfinite(float(v)) else f"{float(v):.6g}"


def choose(front: Sequence[Metrics], qssf: Metrics) -> Choice:
    """Apply rule *chosen point* to the front's tuning-window metrics against QSSF's.

    Parameters
    ----------
    front : sequence of mappings
        Each front point's tuning-window metrics (``report.json`` metric names), in trial order.
    qssf : mapping
        QSSF's metrics on the tuning window.

    Raises
    ------
    ValueError
        When the front is empty (no trial completed).
    """
    if not front:
        raise ValueError("the Pareto front is empty: no trial completed")
    bound = ", ".join(f"{m} {'>=' if m == 'jain_index' else '<='} {_fmt(qssf.get(m))}" for m in GUARDS)
    rule = (f"lowest avg_jct_s among the Pareto-front points whose max_wait_s, sla_misses and jain_index on "
            f"the tuning window are no worse than qssf's there ({bound})")
    qualified = [i for i, p in enumerate(front) if all(no_worse(m, p.get(m), qssf.get(m)) for m in GUARDS)]
    if qualified:
        best = min(qualified, key=lambda i: (_jct(front[i]), i))
        return Choice(best, rule, True)
    best = min(range(len(front)), key=lambda i: (_shortfall(front[i], qssf), _jct(front[i]), i))
    gap = _shortfall(front[best], qssf)
    rule += (f"; no front point qualified, so the point with the smallest worst relative shortfall against "
             f"qssf on those three metrics was chosen ({gap:.1%} worse; ties: lowest avg_jct_s)")
    return Choice(best, rule, False)
