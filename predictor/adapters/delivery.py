"""At-least-once delivery of decisions to a scheduler through the state store's outbox.

``enqueue_decisions`` writes each decision to the outbox (``predictor.store.outbox``) under an
idempotency key made of what the adapter acts on: the same decision made again in the next cycle is
not queued twice, a changed one is. ``deliver_due`` claims due items, applies each with the adapter
and records the outcome:

* applied (nothing deferred) -> delivered;
* applied with deferred steps (an eviction's requeue after its grace period) -> due again when
  the first deferred step is, so the next pass finishes it;
* scheduler unreachable (``retryable``) -> due again after exponential backoff with jitter;
* refused by the scheduler (the job ended, an invalid QoS) -> ``dead``, with the error kept.

A worker that dies mid-delivery leaves its claim to expire and the item is delivered again; the
adapters apply idempotently, so a second delivery changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from predictor.adapters.base import AppliedAction, ClusterAdapter
from predictor.policy.decision import Decision, EvictionPlan, Placement, Priority, Reservation, Victim
from predictor.store.database import Database
from predictor.store.outbox import claim_due, enqueue_decision, mark_delivered, mark_failed

__all__ = ["decision_to_payload", "decision_from_payload", "idempotency_key", "enqueue_decisions",
           "deliver_due", "retry_delay"]

#: Fields of a decision payload that change what an adapter does (the idempotency key covers these).
ACTED_ON = ("job_id", "priority", "action", "tier", "queue", "flavor", "num_gpus", "placement", "reservation",
            "eviction", "time_limit_s")


def _nodes(pairs: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"node": n, "gpus": int(g)} for n, g in pairs]


def _placement(p: Placement | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"gpu_type": p.gpu_type, "gpus_by_node": _nodes(p.gpus_by_node), "placement_class": p.placement_class,
            "slowdown": p.slowdown, "num_gpus": p.num_gpus}


def decision_to_payload(d: Decision) -> dict[str, Any]:
    """A JSON document for ``d`` (the same shape as the service's DecisionPublic)."""
    r, e = d.reservation, d.eviction
    return {
        "job_id": d.job_id, "priority": int(d.priority), "kueue_priority": d.kueue_priority, "action": d.action,
        "tier": d.tier, "queue": d.queue, "flavor": d.flavor, "num_gpus": d.num_gpus,
        "placement": _placement(d.placement),
        "reservation": None if r is None else {"job_id": r.job_id, "start_ts": r.start_ts, "expires_ts": r.expires_ts,
                                               "predicted_end_ts": r.predicted_end_ts,
                                               "placement": _placement(r.placement)},
        "eviction": None if e is None else {
            "for_job_id": e.for_job_id, "signal": e.signal, "grace_s": e.grace_s, "requeue": e.requeue,
            "victims": [{"job_id": v.job_id, "team": v.team, "priority": v.priority, "gpus_by_node": _nodes(v.gpus_by_node),
                         "work_lost_s": v.work_lost_s, "gpu_hours_lost": v.gpu_hours_lost} for v in e.victims]},
        "time_limit_s": d.time_limit_s, "reason": d.reason, "model_version": d.model_version,
        "decided_at": d.decided_at, "constraint": d.constraint,
    }


def _pairs(items: Iterable[dict[str, Any]]) -> tuple[tuple[str, int], ...]:
    return tuple((str(i["node"]), int(i["gpus"])) for i in items)


def _placement_from(doc: dict[str, Any] | None) -> Placement | None:
    if not doc:
        return None
    return Placement(gpu_type=doc["gpu_type"], gpus_by_node=_pairs(doc.get("gpus_by_node") or ()),
                     placement_class=doc["placement_class"], slowdown=float(doc.get("slowdown") or 1.0))


def decision_from_payload(doc: dict[str, Any]) -> Decision:
    """Rebuild the Decision an adapter needs from a payload (or the service's DecisionPublic JSON)."""
    r, e = doc.get("reservation"), doc.get("eviction")
    reservation = None
    if r and r.get("placement"):
        reservation = Reservation(job_id=r.get("job_id") or doc["job_id"], start_ts=float(r["start_ts"]),
                                  expires_ts=float(r["expires_ts"]), placement=_placement_from(r["placement"]),
                                  predicted_end_ts=float(r.get("predicted_end_ts") or r["expires_ts"]))
    eviction = None
    if e:
        eviction = EvictionPlan(
            for_job_id=e["for_job_id"], signal=e.get("signal") or "SIGTERM",
            grace_s=float(e["grace_s"]) if e.get("grace_s") is not None else 120.0, requeue=bool(e.get("requeue", True)),
            victims=tuple(Victim(job_id=v["job_id"], team=v.get("team"), priority=int(v.get("priority", 0)),
                                 gpus_by_node=_pairs(v.get("gpus_by_node") or ()),
                                 work_lost_s=float(v.get("work_lost_s") or 0.0),
                                 gpu_hours_lost=float(v.get("gpu_hours_lost") or 0.0)) for v in e.get("victims", ())))
    return Decision(job_id=doc["job_id"], priority=Priority(int(doc["priority"])), factors=(), action=doc["action"],
                    tier=doc["tier"], queue=doc.get("queue"), flavor=doc.get("flavor"),
                    num_gpus=int(doc.get("num_gpus") or 0), placement=_placement_from(doc.get("placement")),
                    reservation=reservation, eviction=eviction, time_limit_s=doc.get("time_limit_s"),
                    reason=doc.get("reason") or "", model_version=doc.get("model_version") or "fallback",
                    decided_at=float(doc.get("decided_at") or 0.0), constraint=doc.get("constraint"))


def idempotency_key(payload: dict[str, Any]) -> str:
    """Hash of what the adapter acts on: equal decisions share a key, any acted-on change makes a new one."""
    acted = {k: payload.get(k) for k in ACTED_ON}
    if payload.get("constraint"):  # residency: only constrained decisions key on it (others keep their keys)
        acted["constraint"] = payload["constraint"]
    text = json.dumps(acted, sort_keys=True, separators=(",", ":"), default=str)
    return f"{payload['job_id']}:{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def enqueue_decisions(db: Database, target: str, decisions: Sequence[Decision], now: float) -> list[int]:
    """Queue decisions for ``target`` in one transaction; return the outbox ids (existing ones reused)."""
    ids = []
    with db.session() as s:
        for d in decisions:
            payload = decision_to_payload(d)
            ids.append(enqueue_decision(s, target, d.job_id, payload, idempotency_key(payload), now=now))
        s.commit()
    return ids


def retry_delay(attempts: int, base_s: float = 5.0, cap_s: float = 600.0,
                uniform: Callable[[float, float], float] = random.uniform) -> float:
    """Full-jitter backoff before the next delivery of an item that failed ``attempts`` times."""
    return uniform(0.0, min(cap_s, base_s * 2 ** max(attempts - 1, 0)))


def deliver_due(db: Database, adapter: ClusterAdapter, target: str, now: float, *, limit: int = 100,
                retry_base_s: float = 5.0) -> list[AppliedAction]:
    """Claim due decisions for ``target``, apply each, and record delivered / retry / dead."""
    with db.session() as s:
        items = claim_due(s, target, limit=limit, now=now)
        s.commit()
    results = []
    for item in items:
        try:
            decision = decision_from_payload(item.payload)
        except (KeyError, TypeError, ValueError) as exc:
            result = AppliedAction(target, item.job_id, error=f"undeliverable payload: {exc!r}")
        else:
            result = adapter.apply(decision, now=now)
        with db.session() as s:
            if result.ok and not result.deferred:
                mark_delivered(s, item.id, now=now)
            elif result.ok:
                first = min(op.not_before_ts or now for op in result.deferred)
                mark_failed(s, item.id, f"waiting: {result.deferred[0].description}", retry_at=first)
            elif result.retryable:
                mark_failed(s, item.id, result.error or "unavailable",
                            retry_at=now + retry_delay(item.attempts, retry_base_s))
            else:
                mark_failed(s, item.id, result.error or "rejected", retry_at=None)
            s.commit()
        results.append(result)
    return results
