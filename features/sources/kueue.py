"""Kubernetes Kueue Workloads: the output of ``kubectl get workloads -A -o json`` (a ``v1`` ``List``
of ``kueue.x-k8s.io/v1beta1`` or ``v1beta2`` ``Workload`` objects; field names from the Workload CRD).

Mapping (one row per Workload):

- job_id = ``<namespace>/<name>`` (namespace ``default`` when the object names none); team = namespace; queue = ``spec.queueName`` (the LocalQueue);
  tier = ``spec.priorityClassName`` (v1beta1) or ``spec.priorityClassRef.name`` (v1beta2); extras:
  ``cluster_queue`` (``status.admission.clusterQueue``), ``priority``, ``evictions`` (sum of
  ``status.schedulingStats.evictions[].count``); job_name = the controller owner's name (the Job,
  JobSet, PyTorchJob...), else the Workload's. Workloads record no user: user stays null.
- Request: each pod set's ``count`` x its pod's requests (containers summed, init containers taken
  as the max, limits used where an extended resource has no request); ``status.resourceRequests``
  (totals after LimitRange defaults) wins when present. ``nvidia.com/gpu`` (or ``amd.com/gpu``) ->
  num_gpus, ``cpu`` -> cpus, ``memory`` -> mem_mib. gpu_type = the ResourceFlavor assigned to the GPU
  resource (``status.admission.podSetAssignments[].flavors``), else a GPU product node selector, named
  through ``features.gpu_types`` where the name is one it knows.
  time_limit_s = ``spec.maximumExecutionTimeSeconds``, else the pod's ``activeDeadlineSeconds``.
- Times: submit = ``metadata.creationTimestamp``; start = the ``Admitted=True`` condition's
  ``lastTransitionTime`` (the last admission); end = the ``Finished`` condition's. A workload that
  ended by eviction no longer has ``Admitted=True``; its start is then end minus Kueue's
  ``accumulatedPastExecutionTimeSeconds`` when recorded, else unknown.
- Memory descriptors: annotations and labels ``predictor/<key>`` (or one ``predictor/memory``
  annotation of ``key=value`` pairs) on the Workload or its pod templates
  (``features.memory_conventions``; the Workload's own win).
- Residency and checkpoints (docs/residency.md): ``constraints`` from the pod templates'
  ``nodeSelector`` and required ``nodeAffinity`` (``In`` terms), reading only the labels that mean
  residency (:data:`RESIDENCY_LABELS`: region, zone -> site, node pool, and ``predictor/`` labels other
  than the generated flavor/rack/block ones; other labels are Kubernetes' to enforce), combined
  with a ``predictor/constraints`` annotation; ``predictor/data-class``, ``predictor/checkpoint-kind``,
  ``predictor/checkpoint-interval``, ``predictor/checkpoint-size-gb`` annotations or labels
  (``features.job_conventions``).
- Outcome: ``Finished`` reason ``Succeeded`` -> COMPLETED; ``Failed`` -> FAILED (OUT_OF_MEMORY /
  TIMEOUT when the message says ``OOMKilled`` / ``DeadlineExceeded``); ``AdmissionChecksRejected``
  -> CANCELLED. Not finished: an eviction for ``MaximumExecutionTimeExceeded`` -> TIMEOUT; an
  inactive (``spec.active: false``) workload last evicted by ``Preempted`` -> PREEMPTED, otherwise
  CANCELLED (ended at the eviction); ``Admitted=True`` -> RUNNING; else PENDING (censored).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from features.constraints import (
    WELL_KNOWN_LABELS,
    combine_constraints,
    constraint_from_node_affinity,
    constraint_from_node_selector,
)
from features.gpu_types import DEFAULT_VOCABULARY
from features.job_conventions import job_fields_from_kubernetes
from features.memory_conventions import descriptors_from_kubernetes
from features.schema import conform
from features.sources._base import DEFAULT_CHUNK_ROWS, READER_REJECT, Reader, batched, parse_timestamps
from features.sources.jsonstream import iter_records

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
GPU_PRODUCT_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
RFC3339 = "%Y-%m-%dT%H:%M:%S%z"
#: Labels the adapter writes itself (predictor.adapters.kueue.manifests.KueueNaming): never constraints.
GENERATED_LABELS = ("predictor/gpu-type", "predictor/rack", "predictor/block")


def is_residency_label(key: str) -> bool:
    """Whether a node-selector label means residency (:data:`RESIDENCY_LABELS`)."""
    return key in WELL_KNOWN_LABELS or (key.startswith("predictor/") and key not in GENERATED_LABELS)


RESIDENCY_LABELS = (*WELL_KNOWN_LABELS, "predictor/<name> (not gpu-type, rack, block)")
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {None: 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}


def parse_quantity(text: Any) -> float:
    """A Kubernetes resource quantity (``500m``, ``64Gi``, ``2``, ``1e3``) as a number.

    Raises
    ------
    ValueError
        When ``text`` is not a quantity.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


class KueueReader(Reader):
    """``kubectl get workloads -A -o json`` exports."""

    name = "kueue"
    summary = "Kueue Workloads from `kubectl get workloads -A -o json` (v1beta1/v1beta2)"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        return b"kueue.x-k8s.io/" in head and b'"Workload"' in head

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        for path in paths:
            with self.tracker.open_text(path) as stream:
                for batch in batched(iter_records(stream, path), chunk_rows):
                    yield self._frame([workload_record(item) for item in batch])

    def _frame(self, records: list[dict[str, Any]]) -> pd.DataFrame:
        return records_frame(records, self.name)


def records_frame(records: list[dict[str, Any]], source: str = "kueue") -> pd.DataFrame:
    """``workload_record`` results as a table: times parsed to epoch seconds (an unparseable one
    rejects the row), a lost start recovered from Kueue's accumulated execution time, GPU types
    named through ``features.gpu_types``."""
    frame = pd.DataFrame.from_records(records)
    for col in ("submit_ts", "start_ts", "end_ts", "accumulated_s", "gpu_type", READER_REJECT):
        if col not in frame:
            frame[col] = None
    frame[READER_REJECT] = frame[READER_REJECT].astype("string")
    for col in ("submit_ts", "start_ts", "end_ts"):
        values = frame.pop(col)
        raw = pa.array([v if isinstance(v, str) else (None if v is None or v != v else str(v)) for v in values],
                       pa.string())
        frame[col], bad = parse_timestamps(raw, RFC3339, "UTC")
        frame.loc[bad & frame[READER_REJECT].isna().to_numpy(), READER_REJECT] = f"unparseable {col} timestamp"
    # a workload evicted for good lost its Admitted time; Kueue's accumulated execution time gives it back
    accumulated = pd.to_numeric(frame.pop("accumulated_s"), errors="coerce").to_numpy(dtype="float64")
    recover = np.isnan(frame["start_ts"].to_numpy()) & ~np.isnan(frame["end_ts"].to_numpy()) & ~np.isnan(accumulated)
    frame.loc[recover, "start_ts"] = frame.loc[recover, "end_ts"] - accumulated[recover]
    frame["gpu_type"] = DEFAULT_VOCABULARY.canonicalise(frame["gpu_type"].tolist())
    frame["source"] = source
    return frame


def workload_frame(objects: Iterable[dict[str, Any]], now: float) -> pd.DataFrame:
    """Canonical rows (``conform``-typed) of Workload objects as the Kubernetes API returns them, for the
    adapter: the reader's mapping, with a running workload's observed run time up to ``now`` and the
    extras ``priority``, ``cluster_queue``, ``evictions`` and ``parse_error`` (None when usable)."""
    records = [workload_record(o) for o in objects]
    if not records:
        return conform(pd.DataFrame({"job_id": pd.Series([], dtype=object)}))
    frame = records_frame(records)
    running = (frame["state"] == "RUNNING").to_numpy()
    start = frame["start_ts"].to_numpy(dtype="float64")
    duration = np.where(~np.isnan(frame["end_ts"].to_numpy(dtype="float64")),
                        frame["end_ts"].to_numpy(dtype="float64") - start, np.nan)
    frame["duration_s"] = np.where(running, np.maximum(now - start, 0.0), duration)
    frame["censored"] = frame["state"].isin(["PENDING", "RUNNING"]).to_numpy()
    return conform(frame.rename(columns={READER_REJECT: "parse_error"}))


def _condition(conds: list[dict], kind: str, status: str = "True") -> dict | None:
    for cond in conds:
        if cond.get("type") == kind and str(cond.get("status")) == status:
            return cond
    return None


def _pod_request(pod_spec: dict, resource: str) -> float | None:
    """A pod's request of ``resource`` (None when no container names it)."""
    def one(container: dict) -> float | None:
        res = container.get("resources") or {}
        value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        return parse_quantity(value) if value is not None else None

    main = [v for v in (one(c) for c in pod_spec.get("containers") or []) if v is not None]
    init = [v for v in (one(c) for c in pod_spec.get("initContainers") or []) if v is not None]
    if not main and not init:
        return None
    return max(sum(main), max(init, default=0.0))


def _requests(spec: dict, status: dict) -> dict[str, float]:
    """Total requests of the workload per resource name."""
    totals: dict[str, float] = {}
    from_status = status.get("resourceRequests") or []
    if from_status:
        for pod_set in from_status:
            for res, qty in (pod_set.get("resources") or {}).items():
                totals[res] = totals.get(res, 0.0) + parse_quantity(qty)
        return totals
    for pod_set in spec.get("podSets") or []:
        count = float(pod_set.get("count", 1))
        pod = ((pod_set.get("template") or {}).get("spec")) or {}
        for res in (*GPU_RESOURCES, "cpu", "memory"):
            per_pod = _pod_request(pod, res)
            if per_pod is not None:
                totals[res] = totals.get(res, 0.0) + count * per_pod
    return totals


def _gpu_type(spec: dict, status: dict) -> str | None:
    for assignment in ((status.get("admission") or {}).get("podSetAssignments")) or []:
        flavors = assignment.get("flavors") or {}
        for res in GPU_RESOURCES:
            if flavors.get(res):
                return str(flavors[res])
    for pod_set in spec.get("podSets") or []:
        selector = (((pod_set.get("template") or {}).get("spec")) or {}).get("nodeSelector") or {}
        for label in GPU_PRODUCT_LABELS:
            if selector.get(label):
                return str(selector[label])
    return None


def _outcome(spec: dict, conds: list[dict]) -> tuple[str, str | None]:
    """(state, end time) from the Workload's conditions."""
    finished = _condition(conds, "Finished")
    if finished is not None:
        reason, message = finished.get("reason", ""), finished.get("message") or ""
        if reason == "Succeeded":
            state = "COMPLETED"
        elif reason == "AdmissionChecksRejected":
            state = "CANCELLED"
        elif "OOMKilled" in message:
            state = "OUT_OF_MEMORY"
        elif "DeadlineExceeded" in message:
            state = "TIMEOUT"
        else:
            state = "FAILED"
        return state, finished.get("lastTransitionTime")
    evicted = _condition(conds, "Evicted")
    if evicted is not None:
        text = f"{evicted.get('reason', '')} {evicted.get('message') or ''}"
        if "MaximumExecutionTimeExceeded" in text:
            return "TIMEOUT", evicted.get("lastTransitionTime")
        if spec.get("active") is False:
            state = "PREEMPTED" if evicted.get("reason") == "Preempted" else "CANCELLED"
            return state, evicted.get("lastTransitionTime")
    if _condition(conds, "Admitted") is not None:
        return "RUNNING", None
    return "PENDING", None


def _owner_name(meta: dict) -> str | None:
    """The name of the object the Workload was made for (its controller owner, e.g. the batch Job)."""
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    return owner.get("name")


def workload_record(item: Any) -> dict[str, Any]:
    """One Workload object -> canonical fields (times still as RFC 3339 strings)."""
    if not isinstance(item, dict) or item.get("kind", "Workload") != "Workload":
        kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
        return {"job_id": None, READER_REJECT: f"not a Workload (kind {kind!r})"}
    meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
    conds = status.get("conditions") or []
    name, namespace = meta.get("name"), meta.get("namespace") or "default"  # Kubernetes' own default
    record: dict[str, Any] = {
        "job_id": f"{namespace}/{name}" if name else None,
        "team": namespace,
        "queue": spec.get("queueName"),
        "tier": spec.get("priorityClassName") or (spec.get("priorityClassRef") or {}).get("name"),
        "priority": spec.get("priority"),
        "cluster_queue": (status.get("admission") or {}).get("clusterQueue"),
        "evictions": sum(int(e.get("count", 0)) for e in (status.get("schedulingStats") or {}).get("evictions") or []),
        "submit_ts": meta.get("creationTimestamp"),
        "job_name": _owner_name(meta) or name,
        READER_REJECT: None,
    }
    try:
        req = _requests(spec, status)
    except ValueError as exc:
        record[READER_REJECT] = f"unparseable resource request: {exc}"
        req = {}
    # a workload whose pods request no GPU is a CPU job (0); unknown only when nothing parsed
    gpus = sum(req.get(r, 0.0) for r in GPU_RESOURCES) if record[READER_REJECT] is None else None
    record.update(num_gpus=gpus, cpus=req.get("cpu"), mem_mib=req["memory"] / 2.0**20 if "memory" in req else None,
                  gpu_type=_gpu_type(spec, status))
    pod = (((spec.get("podSets") or [{}])[0].get("template") or {}).get("spec")) or {}
    record["time_limit_s"] = spec.get("maximumExecutionTimeSeconds") or pod.get("activeDeadlineSeconds")
    admitted = _condition(conds, "Admitted")
    record["start_ts"] = admitted.get("lastTransitionTime") if admitted else None
    record["state"], record["end_ts"] = _outcome(spec, conds)
    record["accumulated_s"] = status.get("accumulatedPastExecutionTimeSeconds",
                                         status.get("accumulatedPastExexcutionTimeSeconds"))  # v1beta1 spelling
    record.update(descriptors_from_kubernetes(_descriptor_maps(meta, spec)))
    record.update(_residency_and_checkpoints(meta, spec))
    return record


def _residency_and_checkpoints(meta: dict, spec: dict) -> dict[str, Any]:
    """Constraint, data class and checkpoint fields (see the module docstring)."""
    found = job_fields_from_kubernetes(_descriptor_maps(meta, spec))
    texts = [found.get("constraints")]
    for pod_set in spec.get("podSets") or []:
        pod = ((pod_set.get("template") or {}).get("spec")) or {}
        selector = {k: v for k, v in (pod.get("nodeSelector") or {}).items()
                    if isinstance(k, str) and is_residency_label(k)}
        texts.append(constraint_from_node_selector(selector))
        texts.append(constraint_from_node_affinity(pod.get("affinity"), keep=is_residency_label))
    text = combine_constraints(*texts)
    if text is not None:
        found["constraints"] = text
    return found


def _descriptor_maps(meta: dict, spec: dict) -> list[dict]:
    """Annotation and label maps that may carry memory descriptors, the Workload's own first."""
    maps = [meta.get("annotations") or {}, meta.get("labels") or {}]
    for pod_set in spec.get("podSets") or []:
        template = (pod_set.get("template") or {}).get("metadata") or {}
        maps += [template.get("annotations") or {}, template.get("labels") or {}]
    return maps
