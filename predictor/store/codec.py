"""JSON documents for predictions and decisions: how they are stored, streamed and served.

One encoding, used by the store (``jobs.prediction``, ``jobs.decision``, ``decisions.payload``), the
stream's event payloads and the API's response models (``serving.schemas.results`` mirrors it).
Non-finite numbers become ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from features.schema import PLACEMENT_CLASSES
from models.prediction import Prediction
from predictor.policy.decision import Decision, EvictionPlan, Placement, Reservation, Victim

__all__ = ["prediction_doc", "decision_doc", "placement_doc", "reservation_doc", "eviction_doc", "jsonable"]


def _num(x: float | None) -> float | None:
    if x.__class__ is float:  # the usual case, without the conversion
        return x if x - x == 0.0 else None  # NaN and +-inf are not finite
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, numpy scalars as Python numbers and non-finite floats as None."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _num(value)
    if hasattr(value, "item"):  # numpy scalar
        return jsonable(value.item())
    return str(value)


def prediction_doc(p: Prediction) -> dict[str, Any]:
    """The stored / served form of a ``Prediction``."""
    return {
        "job_id": p.job_id,
        "duration": {"p10_s": _num(p.duration_p10_s), "p50_s": _num(p.duration_p50_s),
                     "p90_s": _num(p.duration_p90_s)},
        "peak_vram_mib": _num(p.peak_vram_mib),
        "peak_vram_upper_mib": _num(p.peak_vram_upper_mib),
        "fits_gpu_types": list(p.fits_gpu_types),
        "slowdown": {c: _num(p.slowdown_for(c)) for c in PLACEMENT_CLASSES},
        "model_version": p.model_version,
        "fallback": bool(p.fallback),
        "fallback_reason": p.fallback_reason,
    }


def placement_doc(p: Placement | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "gpu_type": p.gpu_type,
        "gpus_by_node": [{"node": node, "gpus": int(n)} for node, n in p.gpus_by_node],
        "placement_class": p.placement_class,
        "slowdown": _num(p.slowdown),
        "num_gpus": int(p.num_gpus),
    }


def reservation_doc(r: Reservation | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"job_id": r.job_id, "start_ts": _num(r.start_ts), "expires_ts": _num(r.expires_ts),
            "predicted_end_ts": _num(r.predicted_end_ts), "placement": placement_doc(r.placement)}


def _victim_doc(v: Victim) -> dict[str, Any]:
    return {"job_id": v.job_id, "team": v.team, "priority": int(v.priority),
            "gpus_by_node": [{"node": node, "gpus": int(n)} for node, n in v.gpus_by_node],
            "work_lost_s": _num(v.work_lost_s), "gpu_hours_lost": _num(v.gpu_hours_lost)}


def eviction_doc(e: EvictionPlan | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {"for_job_id": e.for_job_id, "victims": [_victim_doc(v) for v in e.victims], "signal": e.signal,
            "grace_s": _num(e.grace_s), "requeue": bool(e.requeue), "gpu_hours_lost": _num(e.gpu_hours_lost)}


def decision_doc(d: Decision) -> dict[str, Any]:
    """The stored / served form of a ``Decision`` (factor contributions and the score included)."""
    factors, score = [], 0.0
    for f in d.factors:  # each contribution once; the score sums them in the order Decision.score does
        c = f.value * f.weight
        score += c
        factors.append({"name": f.name, "value": _num(f.value), "weight": _num(f.weight),
                        "contribution": _num(c), "detail": f.detail})
    return {
        "job_id": d.job_id,
        "priority": int(d.priority),
        "kueue_priority": int(d.kueue_priority),
        "score": _num(score),
        "factors": factors,
        "action": d.action,
        "tier": d.tier,
        "queue": d.queue,
        "flavor": d.flavor,
        "num_gpus": int(d.num_gpus),
        "placement": placement_doc(d.placement),
        "reservation": reservation_doc(d.reservation),
        "eviction": eviction_doc(d.eviction),
        "time_limit_s": _num(d.time_limit_s),
        "sla_at_risk": bool(d.sla_at_risk),
        "warnings": list(d.warnings),
        "reason": d.reason,
        "model_version": d.model_version,
        "fallback": bool(d.fallback),
        "decided_at": _num(d.decided_at),
        "constraint": d.constraint,  # residency (docs/residency.md)
        "extra": _plain(d.extra),
    }


def _plain(extra: dict) -> Any:
    """``jsonable(extra)``, without the walk for the usual flat dict of ints and strings."""
    for k, v in extra.items():
        if k.__class__ is not str or (v.__class__ is not int and v.__class__ is not str):
            return jsonable(extra)
    return dict(extra)


def prediction_row(doc: dict[str, Any] | None, job_id: str) -> dict[str, Any]:
    """A stored prediction document back in the batch form (``PREDICTION_COLUMNS``); NaN where absent."""
    nan = float("nan")
    if not doc:
        return {"job_id": job_id, "duration_p10_s": nan, "duration_p50_s": nan, "duration_p90_s": nan,
                "peak_vram_mib": nan, "peak_vram_upper_mib": nan, "fits_gpu_types": "",
                **{f"slowdown_{c}": 1.0 for c in PLACEMENT_CLASSES},
                "model_version": "none", "fallback": True, "fallback_reason": "no prediction stored"}

    def num(x: Any) -> float:
        return nan if x is None else float(x)

    dur = doc.get("duration") or {}
    slow = doc.get("slowdown") or {}
    return {
        "job_id": job_id, "duration_p10_s": num(dur.get("p10_s")), "duration_p50_s": num(dur.get("p50_s")),
        "duration_p90_s": num(dur.get("p90_s")), "peak_vram_mib": num(doc.get("peak_vram_mib")),
        "peak_vram_upper_mib": num(doc.get("peak_vram_upper_mib")),
        "fits_gpu_types": ",".join(doc.get("fits_gpu_types") or ()),
        **{f"slowdown_{c}": num(slow.get(c, 1.0)) for c in PLACEMENT_CLASSES},
        "model_version": doc.get("model_version") or "none", "fallback": bool(doc.get("fallback")),
        "fallback_reason": doc.get("fallback_reason"),
    }
