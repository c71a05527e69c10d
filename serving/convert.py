"""Between API shapes and the engine's: job specs to a canonical frame, scored jobs to JSON."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import orjson
from fastapi.responses import Response

from predictor.engine.engine import Scored, ScoredBatch
from predictor.engine.model_slot import LoadedModel
from predictor.engine.predictions import prediction_docs
from predictor.engine.queue_picture import canonical_columns, columns_from_lists
from predictor.store.codec import decision_doc, prediction_doc
from serving.schemas.jobs import JobSpec

__all__ = ["job_columns", "COLUMNWISE_FROM", "score_response", "batch_response", "JSONBytes"]


#: Below this many specs, ``job_columns`` converts record by record (``canonical_columns``); from it on,
#: column by column (``columns_from_lists``). The same arrays either way; a list per field costs more than it
#: saves on a few jobs (+30 us on one, in a server), and saves a third on a batch of 100 (-0.35 ms).
COLUMNWISE_FROM = 8


def job_columns(specs: Sequence[JobSpec], now: float) -> dict[str, np.ndarray]:
    """Canonical job records for the specs (typed as ``features.schema.conform`` types them), pending,
    submitted now unless given; read from the models' fields as they are (flat models of plain
    values: no ``model_dump`` pass)."""
    n = len(specs)
    if n < COLUMNWISE_FROM:
        records = []
        for spec in specs:
            rec = {k: v for k, v in spec.__dict__.items() if v is not None}
            rec.setdefault("submit_ts", now)
            rec["state"] = "PENDING"
            records.append(rec)
        return canonical_columns(records)
    dicts = [spec.__dict__ for spec in specs]
    names = dict.fromkeys(name for cls in {type(spec) for spec in specs} for name in cls.model_fields)
    lists = {}
    for name in names:
        values = [d.get(name) for d in dicts]
        if values.count(None) != n:
            lists[name] = values
    submit = lists.get("submit_ts")
    lists["submit_ts"] = [now] * n if submit is None else [now if v is None else v for v in submit]
    lists["state"] = ["PENDING"] * n
    return columns_from_lists(lists, n)


class JSONBytes(Response):
    """A response whose body is already JSON (built without a second validation pass)."""

    media_type = "application/json"


def score_response(scored: Sequence[Scored], model: LoadedModel, now: float,
                   start_estimates: Sequence[dict] | None = None) -> Response:
    fallback = any(s.prediction.fallback for s in scored)
    reasons = [s.prediction.fallback_reason for s in scored if s.prediction.fallback_reason]
    body = {
        "results": [{"job_id": s.prediction.job_id, "prediction": prediction_doc(s.prediction),
                     "decision": decision_doc(s.decision)} for s in scored],
        "model": {"version": model.version,
                  "fallback": fallback, "fallback_reason": reasons[0] if reasons else model.fallback_reason},
        "scored_at": now,
    }
    if start_estimates is not None:
        for result, start in zip(body["results"], start_estimates, strict=True):
            result["start_estimate"] = start
    headers = {"x-model-version": model.version, "x-model-fallback": "true" if model.fallback else "false"}
    # orjson: several times faster than json.dumps on a batch's documents (which hold no NaN: the codec
    # writes non-finite numbers as null)
    return JSONBytes(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), headers=headers)


def batch_response(batch: ScoredBatch, now: float, *, degraded: str | None = None,
                   start_estimates: Sequence[dict] | None = None) -> Response:
    """``score_response`` for a :class:`ScoredBatch`: prediction documents straight from the columns,
    the Decisions through the codec, encoded once by orjson. ``degraded``: why the service answered
    with less than it would (``"deadline"``: the analytic fallback, past the caller's deadline)."""
    model = batch.model
    fallback_col = np.asarray(batch.predicted["fallback"], dtype=bool)
    reasons = [r for r in np.asarray(batch.predicted["fallback_reason"], dtype=object)[fallback_col].tolist()
               if isinstance(r, str) and r]
    results = [{"job_id": p["job_id"], "prediction": p, "decision": decision_doc(d)}
               for p, d in zip(prediction_docs(batch.predicted), batch.decisions, strict=True)]
    body = {"results": results,
            "model": {"version": model.version, "fallback": bool(fallback_col.any()),
                      "fallback_reason": reasons[0] if reasons else model.fallback_reason},
            "scored_at": now}
    if start_estimates is not None:  # POST /v1/score?start_estimate=true (docs/explain.md)
        for result, start in zip(results, start_estimates, strict=True):
            result["start_estimate"] = start
    headers = {"x-model-version": model.version, "x-model-fallback": "true" if model.fallback else "false"}
    if degraded is not None:
        body["degraded"] = degraded
        headers["x-degraded"] = degraded
    return JSONBytes(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), headers=headers)
