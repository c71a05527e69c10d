"""Rule *chosen point*: which point of the Pareto front becomes ``policy.yaml``.

A front point *qualifies* when it is no worse than QSSF on the tuning window on every one of the
four metrics the issue judges (``GUARDS``): average JCT, maximum wait and SLA misses at most QSSF's,
Jain's index at least QSSF's. Among the points that qualify, the chosen one has the largest
*margin*: the smallest of its four relative gains over QSSF (average JCT and maximum wait:
``(q - v) / q``; SLA misses: ``(q - m) / max(q, 1)``; Jain's index as unfairness removed:
``(j - j_q) / (1 - j_q)``); ties: the lower average JCT, then the earlier trial. The largest margin,
not the lowest JCT: the point is replayed later on a validation window, and on clusters at other
loads, where a point that beats QSSF by a hair on one metric often loses on it; the margin is the
room it has to keep every metric no worse there.

*Through the window, not on average.* Where the replays also carry the metrics of consecutive parts
of the tuning window (``part_key``: the first and the second half of its jobs by submit time, see
``predictor.sim.metrics.part_metrics``), a point qualifies only when it is no worse than QSSF on the
whole window *and on every part*, and its margin is the smallest over the whole and the parts. A gain
that one busy stretch earns and a quieter stretch gives back is the gain that does not carry to a
later window: on the Philly-derived trace the untuned default beat QSSF on a whole tuning window by
3.2 % and lost on the lighter validation window after it (docs/tuning.md).

*No more jobs lost.* A point qualifies only when it also loses no more of the tuning window's jobs to
out-of-memory failures than QSSF (``LOSSES``, whole window). Jobs that fail for good leave the queue
early and shorten the JCT and wait of the policy that loses them: without this clause a point that
sizes nothing by memory on a cluster of several GPU types (``sizing.use_predictions`` 0) could win
the four guards by failing jobs (on the bundled mixed inventory QSSF lost 231 of 2,100 jobs that way,
``ours`` 17; docs/limitations.md). The count is not in the margin: it is a constraint, not a gain
to trade. When the chosen policy would be QSSF itself and QSSF lost more jobs than a front point, the
rule string says so.

*The base policy instead of a QSSF that loses jobs.* QSSF sizes nothing by memory. When the fallback
below would choose it but it lost at least twice as many of the tuning window's jobs out of memory as
the base policy (trial 0), and at least ``BASE_FALLBACK_MIN_JOBS`` more, the chosen policy is the base
policy instead (``Choice.base``): recommending a policy that fails jobs the user's own policy runs is
worse than any JCT it gains by failing them (on the bundled mixed inventory QSSF lost 120 of the
window's jobs, the base 10, and on the validation window 90 against 7 while its maximum wait was
2.1x; docs/limitations.md). The factor and the floor keep the few crashes by which two replays of the
same cluster differ from switching the fallback; on one GPU type both lose the same jobs.

*QSSF itself when nothing beats it clearly.* A point is chosen only when its margin is at least
``min_margin`` (``predictor tune --min-margin``, 1 % by default). Otherwise (no point qualifies, or the
best margin is smaller) the chosen policy is QSSF itself (``Choice.baseline``): the policy the user
already has is the one we cannot show we beat, and a margin of a fraction of a per cent on the tuning
window is within what the next period moves by (on the Philly-derived study the QSSF-like point, not
QSSF exactly, won by 0.2 % on the whole tuning window and on both halves, then lost by 0.5 % on
average JCT and 0.4 % on maximum wait on the validation window; docs/tuning.md). The rule string
says which case it was and, when none qualified, how far the closest point was (the smallest worst
relative shortfall over the four metrics, whole window and parts).

*Which QSSF.* "QSSF" above is the preset ``choose`` is told to judge against (``name``):
``predictor.tune.study.judging_baseline`` passes ``qssf-sized`` (QSSF with the base policy's memory
sizing) on a cluster of several GPU types and ``qssf`` on one; the rule string names it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from predictor.tune.objectives import no_worse

__all__ = ["GUARDS", "LOSSES", "BASE_FALLBACK_MIN_JOBS", "MIN_MARGIN", "Choice", "choose", "margin", "part_key", "parts_of"]

#: The metrics the chosen point must not lose on against QSSF.
GUARDS: tuple[str, ...] = ("avg_jct_s", "max_wait_s", "sla_misses", "jain_index")
#: The count the chosen point must not exceed QSSF's on (whole window): jobs failed out of memory for good.
LOSSES = "jobs_failed_oom"
#: QSSF must lose at least this many more jobs than the base policy (and twice as many) for the base fallback.
BASE_FALLBACK_MIN_JOBS = 5

Metrics = Mapping[str, float | None]


def part_key(part: int, metric: str) -> str:
    """The key of ``metric`` on part ``part`` (1-based) of the tuning window in a replay's metrics."""
    return f"part{part}.{metric}"


def parts_of(point: Metrics) -> list[Metrics]:
    """The whole window's metrics, then each part's that ``point`` carries (``part_key``)."""
    views: list[Metrics] = [point]
    k = 1
    while part_key(k, GUARDS[0]) in point:
        views.append({m: point.get(part_key(k, m)) for m in GUARDS})
        k += 1
    return views


def _paired(point: Metrics, qssf: Metrics) -> list[tuple[Metrics, Metrics]]:
    """(point, QSSF) views compared: the whole window and each part both carry."""
    return list(zip(parts_of(point), parts_of(qssf), strict=False))  # parts only where both carry them


@dataclass(frozen=True)
class Choice:
    """The chosen front point: its index in the front (-1 for QSSF itself or the base policy), the rule as
    printed, whether a front point qualified, and whether the chosen policy is QSSF itself or the base policy."""

    index: int
    rule: str
    qualified: bool
    baseline: bool = False
    base: bool = False  # the chosen policy is the base policy (trial 0): QSSF, the fallback, lost many more jobs


def _num(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _gain(metric: str, v: float, q: float) -> float:
    """Relative gain of ``v`` over QSSF's ``q`` (positive: better; see the module docstring)."""
    if metric == "jain_index":
        return (v - q) / (1.0 - q) if q < 1.0 else (0.0 if v >= q else -math.inf)
    if metric == "sla_misses":
        return (q - v) / max(q, 1.0)
    if q > 0:
        return (q - v) / q
    return 0.0 if v <= q else -math.inf


def margin(point: Metrics, qssf: Metrics) -> float:
    """The smallest relative gain over QSSF across ``GUARDS``, on the whole window and on each part
    both carry (negative: worse on some metric; -inf when the point leaves a metric undefined that
    QSSF defines)."""
    return min(_margin(p, q) for p, q in _paired(point, qssf))


def _margin(point: Metrics, qssf: Metrics) -> float:
    worst = math.inf
    for metric in GUARDS:
        v, q = _num(point.get(metric)), _num(qssf.get(metric))
        if not math.isfinite(q):
            continue
        if not math.isfinite(v):
            return -math.inf
        worst = min(worst, _gain(metric, v, q))
    return worst if math.isfinite(worst) else 0.0


def _shortfall(point: Metrics, qssf: Metrics) -> float:
    return max(_shortfall_one(p, q) for p, q in _paired(point, qssf))


def _shortfall_one(point: Metrics, qssf: Metrics) -> float:
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


#: The smallest margin over QSSF for which a searched point is chosen rather than QSSF itself.
MIN_MARGIN = 0.01


def choose(front: Sequence[Metrics], qssf: Metrics, min_margin: float = MIN_MARGIN,
           base: Metrics | None = None, name: str = "qssf") -> Choice:
    """Apply rule *chosen point* to the front's tuning-window metrics against QSSF's.

    Parameters
    ----------
    front : sequence of mappings
        Each front point's tuning-window metrics (``report.json`` metric names), in trial order.
    qssf : mapping
        QSSF's metrics on the tuning window.
    min_margin : float
        A point is chosen only with at least this margin; otherwise QSSF itself (``Choice.baseline``).
    base : mapping, optional
        The base policy's (trial 0's) metrics on the tuning window: chosen instead of QSSF when QSSF
        lost many more jobs out of memory (``Choice.base``; see the module docstring).
    name : str
        The preset ``qssf`` came from, as the rule string names it (``qssf`` or ``qssf-sized``).

    Raises
    ------
    ValueError
        When the front is empty (no trial completed).
    """
    if not front:
        raise ValueError("the Pareto front is empty: no trial completed")
    bound = ", ".join(f"{m} {'>=' if m == 'jain_index' else '<='} {_fmt(qssf.get(m))}" for m in GUARDS)
    parts = len(parts_of(qssf)) - 1
    where = (f"on the tuning window and on each of its {parts} consecutive parts by submit time" if parts
             else "on the tuning window")
    rule = (f"largest margin over {name} (the smallest relative gain across avg_jct_s, max_wait_s, sla_misses, "
            f"jain_index{', whole window and parts' if parts else ''}) among the Pareto-front points no worse "
            f"than {name} on all four {where} (whole window: {bound}), if that margin is at least "
            f"{min_margin:.1%}, else {name} itself; ties: lowest avg_jct_s")
    if qssf.get(LOSSES) is not None:
        rule += f"; a point also loses no more jobs to out-of-memory failures than {name} ({_fmt(qssf.get(LOSSES))})"
    qualified = [i for i, p in enumerate(front)
                 if all(no_worse(m, pv.get(m), qv.get(m)) for pv, qv in _paired(p, qssf) for m in GUARDS)
                 and no_worse(LOSSES, p.get(LOSSES), qssf.get(LOSSES))]
    if qualified:
        best = min(qualified, key=lambda i: (-margin(front[i], qssf), _jct(front[i]), i))
        won = margin(front[best], qssf)
        if won >= min_margin:
            return Choice(best, rule + f" (chosen margin {won:.1%})", True)
        return _fallback(rule + f"; the best margin of a front point was {won:.1%}, under {min_margin:.1%}, so the "
                         f"chosen policy is {name} itself", front, qssf, base, qualified=True, name=name)
    closest = min(_shortfall(p, qssf) for p in front)
    why = (f"the closest was {closest:.1%} worse than {name} on its worst metric{', whole window and parts' if parts else ''}"
           if closest > 0 else f"the points no worse than {name} on all four lost more jobs to out-of-memory failures")
    return _fallback(rule + f"; no front point qualified ({why}), so the chosen policy is {name} itself",
                     front, qssf, base, qualified=False, name=name)


def _fallback(rule: str, front: Sequence[Metrics], qssf: Metrics, base: Metrics | None, qualified: bool,
              name: str = "qssf") -> Choice:
    """QSSF itself, or the base policy when QSSF lost many more jobs out of memory than it."""
    q, b = _num(qssf.get(LOSSES)), _num((base or {}).get(LOSSES))
    if math.isfinite(q) and math.isfinite(b) and q >= 2 * b and q - b >= BASE_FALLBACK_MIN_JOBS:
        return Choice(-1, rule + f", but {name} lost {q:,.0f} of the tuning "
                      f"window's jobs to out-of-memory failures against {b:,.0f} for the base policy (trial 0), so the "
                      "chosen policy is the base policy", qualified, base=True)
    return Choice(-1, rule + _losses_note(front, qssf, name), qualified, baseline=True)


def _losses_note(front: Sequence[Metrics], qssf: Metrics, name: str) -> str:
    """When QSSF, chosen, lost more jobs out of memory than a front point: how many, against the fewest."""
    q = _num(qssf.get(LOSSES))
    counts = [v for v in (_num(p.get(LOSSES)) for p in front) if math.isfinite(v)]
    if not (math.isfinite(q) and counts and min(counts) < q):
        return ""
    return (f" (note: {name} lost {q:,.0f} of the tuning window's jobs to out-of-memory failures, a front point "
            f"{min(counts):,.0f}; its shorter JCTs partly come from those failures)")
