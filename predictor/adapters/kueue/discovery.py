"""What a Kubernetes cluster running Kueue says about itself: GPU nodes from the labels NVIDIA's GPU
feature discovery sets (``nvidia.com/gpu.product``, ``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory``
in MiB; the ``nvidia.com/gpu`` capacity where the count label is missing), CPUs and memory from the
node's capacity, rack and block from the topology labels Kueue's topology-aware scheduling uses;
teams (the namespaces holding LocalQueues) and priority classes (PriorityClasses and
WorkloadPriorityClasses).

Topology labels: the levels of the cluster's Kueue ``Topology`` when it has one (the level above
``kubernetes.io/hostname`` is the rack, the one above that the block), else the labels given
(``predictor kueue manifests`` uses ``predictor/rack`` and ``predictor/block``). NVLink: a product
named ``...-SXM...`` sits on an NVSwitch baseboard (HGX/DGX), so its GPUs form one island; PCIe
products form none. The written inventory can be edited where a site knows better.
"""

from __future__ import annotations

import json
import os
from typing import Any

from kubernetes import client
from kubernetes.utils import parse_quantity

from features.constraints import WELL_KNOWN_LABELS
from features.errors import InputError
from features.sources.kueue import is_residency_label
from predictor.adapters.base import SchedulerError
from predictor.adapters.discovery import DiscoveredNode, PriorityClass
from predictor.adapters.kueue.adapter import GROUP, _classify
from predictor.adapters.kueue.manifests import HOSTNAME_LABEL, KueueNaming

__all__ = ["kube_api_client", "kubernetes_nodes", "topology_labels", "kueue_teams", "priority_classes",
           "PRODUCT_LABEL", "COUNT_LABEL", "MEMORY_LABEL"]

PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_CAPACITY = "nvidia.com/gpu"


def kube_api_client() -> client.ApiClient:
    """An API client from the in-cluster service account, else ``KUBECONFIG`` / ``~/.kube/config``.

    Raises
    ------
    InputError
        Neither is there.
    """
    from kubernetes import config as kube_config

    configuration = client.Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException:
        try:
            kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
        except (kube_config.ConfigException, OSError) as exc:
            raise InputError(f"no Kubernetes credentials: {exc} (set KUBECONFIG or run in a pod)") from None
    return client.ApiClient(configuration)


def _json(call: Any, what: str, *args: Any) -> dict[str, Any]:
    try:
        return json.loads(call(*args, _preload_content=False).data or b"{}")
    except Exception as exc:  # ApiException, urllib3 and OS errors: classified like the adapter's
        raise _classify(exc, what) from None


def topology_labels(api: client.ApiClient, naming: KueueNaming) -> tuple[str | None, str | None]:
    """(rack label, block label): from the cluster's Kueue Topology if it has one, else ``naming``'s."""
    custom = client.CustomObjectsApi(api)
    try:
        doc = json.loads(custom.list_cluster_custom_object(GROUP, naming.api_version, "topologies",
                                                           _preload_content=False).data or b"{}")
    except client.ApiException as exc:
        if exc.status in (403, 404):  # no Topology CRD, or not allowed to read it: use the given labels
            return naming.rack_label, naming.block_label
        raise _classify(exc, "LIST topologies") from None
    for topo in doc.get("items") or []:
        levels = [lv.get("nodeLabel") for lv in (topo.get("spec") or {}).get("levels") or []]
        levels = [lv for lv in levels if lv and lv != HOSTNAME_LABEL]
        if levels:
            return levels[-1], (levels[-2] if len(levels) > 1 else None)
    return naming.rack_label, naming.block_label


def _quantity_int(value: Any) -> int | None:
    try:
        return int(parse_quantity(value)) if value is not None else None
    except ValueError:
        return None


def _residency(labels: dict[str, str], naming: KueueNaming) -> dict[str, Any]:
    """Residency attributes from a node's labels (the labels the workload reader reads as constraints;
    the adapter's own pool label is the pool)."""
    out: dict[str, Any] = {}
    for label, key in {naming.pool_label: "pool", **WELL_KNOWN_LABELS}.items():
        if labels.get(label) and key not in out:
            out[key] = labels[label]
    own = tuple(sorted((k, str(v)) for k, v in labels.items() if is_residency_label(k) and k not in WELL_KNOWN_LABELS
                       and k != naming.pool_label))
    if own:
        out["labels"] = own
    return out


def kubernetes_nodes(api: client.ApiClient, naming: KueueNaming | None = None) -> list[DiscoveredNode]:
    """Every node, with its GPUs from the GPU feature discovery labels."""
    naming = naming or KueueNaming()
    rack_label, block_label = topology_labels(api, naming)
    doc = _json(client.CoreV1Api(api).list_node, "LIST nodes")
    nodes = []
    for item in doc.get("items") or []:
        meta, status = item.get("metadata") or {}, item.get("status") or {}
        labels, capacity = meta.get("labels") or {}, status.get("capacity") or {}
        product = labels.get(PRODUCT_LABEL)
        gpus = _quantity_int(labels.get(COUNT_LABEL)) or _quantity_int(capacity.get(GPU_CAPACITY)) or 0
        memory = _quantity_int(capacity.get("memory"))
        nodes.append(DiscoveredNode(
            name=meta["name"], gpu_label=product, gpus=gpus if product else 0,
            gpu_memory_mib=_quantity_int(labels.get(MEMORY_LABEL)),
            cpus=_quantity_int(capacity.get("cpu")), mem_mib=memory // 2**20 if memory is not None else None,
            rack=labels.get(rack_label) if rack_label else None, block=labels.get(block_label) if block_label else None,
            nvlink=bool(product) and "SXM" in product.upper() and gpus > 1, **_residency(labels, naming)))
    return nodes


def kueue_teams(api: client.ApiClient, api_version: str = "v1beta2") -> dict[str, float]:
    """Namespaces holding a LocalQueue (the teams), each with share 1 or its ClusterQueue's fair-sharing weight."""
    custom = client.CustomObjectsApi(api)
    queues = _json(custom.list_cluster_custom_object, "LIST localqueues", GROUP, api_version, "localqueues")
    weights: dict[str, float] = {}
    try:
        cqs = _json(custom.list_cluster_custom_object, "LIST clusterqueues", GROUP, api_version, "clusterqueues")
        for cq in cqs.get("items") or []:
            weight = ((cq.get("spec") or {}).get("fairSharing") or {}).get("weight")
            if weight is not None:
                weights[cq["metadata"]["name"]] = float(parse_quantity(weight))
    except SchedulerError:  # weights are a refinement: without them every team gets share 1
        weights = {}
    teams: dict[str, float] = {}
    for q in queues.get("items") or []:
        ns = (q.get("metadata") or {}).get("namespace")
        if ns:
            weight = weights.get((q.get("spec") or {}).get("clusterQueue") or "")
            teams[ns] = max(teams.get(ns, 0.0), weight if weight and weight > 0 else 1.0)
    return teams


def priority_classes(api: client.ApiClient, api_version: str = "v1beta2") -> list[PriorityClass]:
    """PriorityClasses (without Kubernetes' own ``system-*``) and Kueue WorkloadPriorityClasses."""
    out: dict[str, PriorityClass] = {}
    pcs = _json(client.SchedulingV1Api(api).list_priority_class, "LIST priorityclasses")
    for pc in pcs.get("items") or []:
        name = pc["metadata"]["name"]
        if not name.startswith("system-"):
            out[name] = PriorityClass(name, float(pc.get("value", 0)))
    try:
        wpcs = _json(client.CustomObjectsApi(api).list_cluster_custom_object, "LIST workloadpriorityclasses",
                     GROUP, api_version, "workloadpriorityclasses")
    except SchedulerError:  # a cluster without Kueue priority classes still has PriorityClasses
        wpcs = {}
    for pc in wpcs.get("items") or []:
        out.setdefault(pc["metadata"]["name"], PriorityClass(pc["metadata"]["name"], float(pc.get("value", 0))))
    return sorted(out.values(), key=lambda c: (-c.priority, c.name))
