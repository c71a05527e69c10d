"""A read-only picture of a Kubernetes cluster running Kueue, for the doctor's checks: the objects the
API returned, by kind, and small parsed views of them.

=========================  ================================================================
kind                       read with (official ``kubernetes`` client)
=========================  ================================================================
ResourceFlavor, ClusterQueue, LocalQueue, WorkloadPriorityClass, Workload
                           ``CustomObjectsApi.list_cluster_custom_object`` (a kind whose
                           CRD is missing reads as none, except ClusterQueue: no Kueue)
Node                       ``CoreV1Api.list_node`` (name, labels, capacity kept)
PriorityClass              ``SchedulingV1Api.list_priority_class``
Job                        ``BatchV1Api.list_job_for_all_namespaces`` (metadata, suspend, status)
=========================  ================================================================

GPU nodes are read as the discovery reads them (:mod:`predictor.adapters.kueue.discovery`: the GPU
feature discovery's ``nvidia.com/gpu.product`` label, the ``nvidia.com/gpu`` capacity).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.utils import parse_quantity
from pydantic import TypeAdapter

from features.errors import InputError
from predictor.adapters.kueue.adapter import GROUP, _classify
from predictor.adapters.kueue.discovery import COUNT_LABEL, GPU_CAPACITY, PRODUCT_LABEL
from predictor.adapters.kueue.manifests import GPU_RESOURCE, KueueNaming

__all__ = ["KueuePicture", "GpuQuota", "read_kueue_picture", "quantity", "KUEUE_KINDS"]

#: Kueue kinds the doctor reads, with their plural.
KUEUE_KINDS = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
               "WorkloadPriorityClass": "workloadpriorityclasses", "Workload": "workloads"}


def quantity(value: Any) -> float | None:
    """A Kubernetes quantity (``"8"``, ``"500m"``, ``2``) as a number; None when absent or unparsable."""
    if value is None:
        return None
    try:
        return float(parse_quantity(value))
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class GpuQuota:
    """A ClusterQueue's ``nvidia.com/gpu`` quota in one flavor, with where it sits in the spec (for JSON patches)."""

    flavor: str
    nominal: float
    borrowing_limit: float | None
    lending_limit: float | None
    path: str  # /spec/resourceGroups/i/flavors/j/resources/k


@dataclass(frozen=True)
class KueuePicture:
    """The objects by kind (see the module docstring) and the names the cluster's Kueue set-up uses."""

    objects: Mapping[str, tuple[dict[str, Any], ...]]
    naming: KueueNaming = field(default_factory=KueueNaming)

    def of(self, kind: str) -> tuple[dict[str, Any], ...]:
        return tuple(self.objects.get(kind, ()))

    # -- parsed views --------------------------------------------------------------------------

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {n["metadata"]["name"]: dict((n.get("metadata") or {}).get("labels") or {}) for n in self.of("Node")}

    def node_gpus(self) -> dict[str, tuple[str | None, int]]:
        """node -> (GPU product label, GPU count) for every node (count 0 without GPUs)."""
        out = {}
        for n in self.of("Node"):
            labels = (n.get("metadata") or {}).get("labels") or {}
            capacity = (n.get("status") or {}).get("capacity") or {}
            count = quantity(labels.get(COUNT_LABEL)) or quantity(capacity.get(GPU_CAPACITY)) or 0
            out[n["metadata"]["name"]] = (labels.get(PRODUCT_LABEL), int(count))
        return out

    def flavor_labels(self) -> dict[str, dict[str, str]]:
        """ResourceFlavor -> its ``spec.nodeLabels``."""
        return {f["metadata"]["name"]: dict((f.get("spec") or {}).get("nodeLabels") or {})
                for f in self.of("ResourceFlavor")}

    def selected_nodes(self, flavor_labels: Mapping[str, str]) -> list[str]:
        """Nodes carrying every label of a flavor (a flavor without labels selects every node)."""
        return sorted(name for name, labels in self.node_labels().items()
                      if all(labels.get(k) == v for k, v in flavor_labels.items()))

    def cluster_queues(self) -> dict[str, dict[str, Any]]:
        return {q["metadata"]["name"]: q for q in self.of("ClusterQueue")}

    def cohort_of(self, cq: Mapping[str, Any]) -> str | None:
        spec = cq.get("spec") or {}
        return spec.get("cohortName") or spec.get("cohort")

    def gpu_quotas(self, cq: Mapping[str, Any]) -> list[GpuQuota]:
        """The ``nvidia.com/gpu`` quota of each flavor of a ClusterQueue."""
        out = []
        for i, group in enumerate((cq.get("spec") or {}).get("resourceGroups") or []):
            for j, flavor in enumerate(group.get("flavors") or []):
                for k, res in enumerate(flavor.get("resources") or []):
                    if res.get("name") == GPU_RESOURCE:
                        out.append(GpuQuota(flavor["name"], quantity(res.get("nominalQuota")) or 0.0,
                                            quantity(res.get("borrowingLimit")), quantity(res.get("lendingLimit")),
                                            f"/spec/resourceGroups/{i}/flavors/{j}/resources/{k}"))
        return out

    def admissible(self, cq_name: str) -> dict[str, float]:
        """flavor -> the most GPUs the ClusterQueue can ever admit in it: its nominal quota plus what it may
        borrow (its ``borrowingLimit``, else what the other queues of its cohort lend)."""
        queues = self.cluster_queues()
        cq = queues[cq_name]
        cohort = self.cohort_of(cq)
        lent: dict[str, float] = {}
        if cohort:
            for name, other in queues.items():
                if name != cq_name and self.cohort_of(other) == cohort:
                    for q in self.gpu_quotas(other):
                        lent[q.flavor] = lent.get(q.flavor, 0.0) + (
                            q.lending_limit if q.lending_limit is not None else q.nominal)
        out = {}
        for q in self.gpu_quotas(cq):
            if not cohort:
                borrow = 0.0
            elif q.borrowing_limit is None:
                borrow = lent.get(q.flavor, 0.0)
            else:
                borrow = min(q.borrowing_limit, lent.get(q.flavor, 0.0))
            out[q.flavor] = out.get(q.flavor, 0.0) + q.nominal + borrow
        return out

    def local_queues(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(namespace, name) -> LocalQueue."""
        return {(q["metadata"].get("namespace") or "default", q["metadata"]["name"]): q for q in self.of("LocalQueue")}

    # -- recording -----------------------------------------------------------------------------

    def to_json(self) -> str:
        return _ADAPTER.dump_json(self, indent=1).decode()

    @classmethod
    def from_json(cls, text: str) -> KueuePicture:
        return _ADAPTER.validate_python(json.loads(text))


_ADAPTER = TypeAdapter(KueuePicture)


def _load(call: Any, what: str, *args: Any) -> list[dict[str, Any]] | None:
    """The items of one list call; None when the API serves no such kind (HTTP 404: its CRD is not installed)."""
    try:
        doc = json.loads(call(*args, _preload_content=False).data or b"{}")
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise _classify(exc, what) from None
    except Exception as exc:  # urllib3 and OS errors: classified like the adapter's
        raise _classify(exc, what) from None
    return list(doc.get("items") or [])


def _node(obj: dict[str, Any]) -> dict[str, Any]:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
            "spec": {"unschedulable": bool((obj.get("spec") or {}).get("unschedulable"))},
            "status": {"capacity": status.get("capacity") or {}}}


def _job(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": meta.get("labels") or {}},
            "spec": {"suspend": bool((obj.get("spec") or {}).get("suspend"))}, "status": obj.get("status") or {}}


def read_kueue_picture(api: client.ApiClient, naming: KueueNaming | None = None) -> KueuePicture:
    """List every kind of the module docstring once.

    Raises
    ------
    InputError
        The cluster serves no Kueue ClusterQueues at ``naming.api_version``.
    SchedulerUnavailable, SchedulerRejected
        The API server is unreachable or refuses a list.
    """
    naming = naming or KueueNaming()
    custom = client.CustomObjectsApi(api)
    objects: dict[str, tuple[dict[str, Any], ...]] = {}
    for kind, plural in KUEUE_KINDS.items():
        items = _load(custom.list_cluster_custom_object, f"LIST {plural}", GROUP, naming.api_version, plural)
        if items is None and kind == "ClusterQueue":
            raise InputError(f"the cluster serves no {GROUP}/{naming.api_version} ClusterQueues: is Kueue "
                             "installed (try --kueue-api-version v1beta1 for Kueue < 0.15)?")
        objects[kind] = tuple(items or ())  # another kind missing: an older Kueue without it
    nodes = _load(client.CoreV1Api(api).list_node, "LIST nodes") or []
    objects["Node"] = tuple(_node(n) for n in nodes)
    objects["PriorityClass"] = tuple(
        {"metadata": {"name": p["metadata"]["name"]}, "value": p.get("value", 0)}
        for p in _load(client.SchedulingV1Api(api).list_priority_class, "LIST priorityclasses") or [])
    jobs = _load(client.BatchV1Api(api).list_job_for_all_namespaces, "LIST jobs") or []
    objects["Job"] = tuple(_job(j) for j in jobs)
    return KueuePicture(objects=objects, naming=naming)
