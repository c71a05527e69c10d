"""Kueue objects mirroring the policy and the inventory, for GitOps (``predictor kueue manifests``) and
for the adapter to create through the API.

=========================  ====================================================================
object                     from
=========================  ====================================================================
WorkloadPriorityClass      one per tier: ``value`` = the tier's ``kueue_priority``
ResourceFlavor             one per GPU type in the inventory: ``nodeLabels`` {flavor label: type},
                           ``topologyName`` when the inventory knows racks/blocks
Topology                   levels block -> rack -> hostname (only the levels the inventory has)
ClusterQueue               one per team, all in one cohort: ``nominalQuota`` per flavor from the
                           team's GPU quota (or its share of the cluster), ``borrowingLimit``,
                           ``fairSharing.weight`` = share, preemption from the tiers' rules
LocalQueue                 one per team, in the team's namespace, pointing at its ClusterQueue
=========================  ====================================================================

Quotas are whole GPUs split by the largest-remainder method, so per flavor they never sum above
the flavor's capacity. CPU and memory are covered too (with the same fraction of the flavor's nodes)
when the inventory gives every GPU node's ``cpus`` and ``mem_mib``: Kueue does not admit a workload
that requests a resource its ClusterQueue does not cover. Without them only ``nvidia.com/gpu`` is
covered, and Kueue must be told to ignore cpu/memory (``resources.excludeResourcePrefixes``). Object names are DNS-1123 forms of policy names (``best_effort`` ->
``best-effort``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from features.errors import InputError
from predictor.adapters.cluster_policy import ClusterPolicy, dns_name
from predictor.capacity.inventory import Inventory, Node

__all__ = [
    "KueueNaming",
    "apportion",
    "priority_classes",
    "resource_flavors",
    "topology",
    "cluster_queues",
    "local_queues",
    "all_manifests",
    "node_label_commands",
    "residency_labels",
    "host_resources",
    "GPU_RESOURCE",
]

GROUP = "kueue.x-k8s.io"
GPU_RESOURCE = "nvidia.com/gpu"
HOSTNAME_LABEL = "kubernetes.io/hostname"
REGION_LABEL = "topology.kubernetes.io/region"  # residency (docs/residency.md)
ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class KueueNaming:
    """Names and labels the generated objects use (all overridable)."""

    api_version: str = "v1beta2"
    cohort: str = "gpu-cluster"
    flavor_label: str = "predictor/gpu-type"
    rack_label: str = "predictor/rack"
    block_label: str = "predictor/block"
    pool_label: str = "predictor/pool"  # residency (predictor.adapters.kueue.selectors)
    data_class_label: str = "predictor/data-class"
    topology_name: str = "gpu-topology"
    local_queue: str = "gpus"

    def __post_init__(self) -> None:
        if self.api_version not in ("v1beta1", "v1beta2"):
            raise InputError(f"Kueue API version must be v1beta1 or v1beta2, got {self.api_version!r}")

    @property
    def group_version(self) -> str:
        return f"{GROUP}/{self.api_version}"

    def cluster_queue(self, team: str) -> str:
        return dns_name(team)

    def namespace(self, team: str) -> str:
        return dns_name(team)

    def flavor(self, gpu_type: str) -> str:
        return dns_name(gpu_type)


def apportion(weights: Mapping[str, float], total: int) -> dict[str, int]:
    """Split ``total`` whole units in proportion to ``weights`` (largest remainder; ties by name)."""
    positive = {k: max(float(w), 0.0) for k, w in weights.items()}
    norm = sum(positive.values())
    if total <= 0 or norm <= 0:
        return {k: 0 for k in weights}
    exact = {k: total * w / norm for k, w in positive.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def _meta(name: str, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "gpu-job-predictor", **(labels or {})}
    return meta


def priority_classes(policy: ClusterPolicy, naming: KueueNaming = KueueNaming()) -> list[dict[str, Any]]:
    """One WorkloadPriorityClass per tier."""
    return [{"apiVersion": naming.group_version, "kind": "WorkloadPriorityClass",
             "metadata": _meta(dns_name(t.name), labels={"predictor/tier": dns_name(t.name)}),
             "value": int(t.kueue_priority), "description": t.description or f"tier {t.name}"}
            for t in policy.tiers]


def _has_topology(inventory: Inventory) -> bool:
    return any(n.rack or n.block for n in inventory.nodes)


def resource_flavors(inventory: Inventory, naming: KueueNaming = KueueNaming()) -> list[dict[str, Any]]:
    """One ResourceFlavor per GPU type, selecting nodes by the flavor label."""
    out = []
    for gpu_type in sorted(inventory.gpus_by_type()):
        spec: dict[str, Any] = {"nodeLabels": {naming.flavor_label: gpu_type}}
        if _has_topology(inventory):
            spec["topologyName"] = naming.topology_name
        out.append({"apiVersion": naming.group_version, "kind": "ResourceFlavor",
                    "metadata": _meta(naming.flavor(gpu_type)), "spec": spec})
    return out


def topology(inventory: Inventory, naming: KueueNaming = KueueNaming()) -> list[dict[str, Any]]:
    """The Topology (block -> rack -> hostname) for topology-aware scheduling, when racks are known."""
    if not _has_topology(inventory):
        return []
    levels = []
    if any(n.block for n in inventory.nodes):
        levels.append({"nodeLabel": naming.block_label})
    if any(n.rack for n in inventory.nodes):
        levels.append({"nodeLabel": naming.rack_label})
    levels.append({"nodeLabel": HOSTNAME_LABEL})
    return [{"apiVersion": naming.group_version, "kind": "Topology",
             "metadata": _meta(naming.topology_name), "spec": {"levels": levels}}]


def _team_gpus(policy: ClusterPolicy, capacity: int) -> dict[str, float]:
    """GPUs each team is entitled to: its explicit quota, else its share of what explicit quotas leave."""
    explicit = {t.name: float(t.nominal_gpus) for t in policy.teams if t.nominal_gpus is not None}
    if sum(explicit.values()) > capacity:
        raise InputError(f"teams' nominal_gpus add up to {sum(explicit.values()):g}, more than the "
                         f"{capacity} GPUs in the inventory")
    rest = [t for t in policy.teams if t.nominal_gpus is None]
    left = capacity - sum(explicit.values())
    shares = sum(t.share for t in rest)
    return {**explicit, **{t.name: left * t.share / shares for t in rest}} if rest else explicit


def _preemption(policy: ClusterPolicy) -> dict[str, Any]:
    if not policy.preemption_enabled:
        return {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}}
    preemptible = {name for t in policy.tiers for name in t.can_preempt}
    spec: dict[str, Any] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    if preemptible:
        # a team borrowing may preempt others' borrowed workloads only of tiers the policy lets be preempted
        threshold = max(policy.tier(name).kueue_priority for name in preemptible)
        spec["borrowWithinCohort"] = {"policy": "LowerPriority", "maxPriorityThreshold": int(threshold)}
    else:
        spec["borrowWithinCohort"] = {"policy": "Never"}
    return spec


def host_resources(inventory: Inventory) -> dict[str, tuple[int, int]] | None:
    """(CPUs, memory MiB) per GPU type, or None when some GPU node lacks either (then only GPUs are covered)."""
    out: dict[str, tuple[int, int]] = {}
    for n in inventory.nodes:
        if not n.gpu_type or not n.num_gpus:
            continue
        if n.cpus is None or n.mem_mib is None:
            return None
        cpus, mem = out.get(n.gpu_type, (0, 0))
        out[n.gpu_type] = (cpus + n.cpus, mem + n.mem_mib)
    return out


def _flavor_resources(quotas: Mapping[str, int], borrow: Mapping[str, int] | None, by_type: Mapping[str, int],
                      host: Mapping[str, tuple[int, int]] | None, naming: KueueNaming) -> list[dict[str, Any]]:
    flavors = []
    for gpu_type in sorted(quotas):
        res: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": int(quotas[gpu_type])}
        if borrow is not None:
            res["borrowingLimit"] = int(borrow[gpu_type])
        resources = [res]
        if host is not None:  # CPU and memory follow the GPUs: the same fraction of the flavor's nodes
            cpus, mem = host[gpu_type]
            frac = quotas[gpu_type] / by_type[gpu_type]
            for name, total, unit in (("cpu", cpus, ""), ("memory", mem, "Mi")):
                item: dict[str, Any] = {"name": name, "nominalQuota": f"{math.floor(total * frac)}{unit}"}
                if borrow is not None:
                    item["borrowingLimit"] = f"{math.floor(total * borrow[gpu_type] / by_type[gpu_type])}{unit}"
                resources.append(item)
        flavors.append({"name": naming.flavor(gpu_type), "resources": resources})
    return flavors


def cluster_queues(policy: ClusterPolicy, inventory: Inventory,
                   naming: KueueNaming = KueueNaming()) -> list[dict[str, Any]]:
    """One ClusterQueue per team, in one cohort, with GPU quotas per flavor."""
    if not policy.teams:
        raise InputError("the policy lists no teams: add teams (with a share) to generate ClusterQueues")
    by_type = inventory.gpus_by_type()
    capacity = sum(by_type.values())
    if capacity == 0:
        raise InputError("the inventory has no GPUs: nothing to put in ClusterQueues")
    entitled = _team_gpus(policy, capacity)
    host = host_resources(inventory)
    covered = [GPU_RESOURCE] + (["cpu", "memory"] if host is not None else [])
    per_type: dict[str, dict[str, int]] = {}
    for gpu_type, count in by_type.items():  # split each flavor among the teams by entitlement
        quota = apportion(entitled, math.floor(count * sum(entitled.values()) / capacity + 1e-9))
        per_type[gpu_type] = quota
    out = []
    for team in policy.teams:
        quotas = {g: per_type[g][team.name] for g in by_type}
        borrow: dict[str, int] | None
        if not policy.borrowing:
            borrow = dict.fromkeys(by_type, 0)
        elif team.borrowing_limit_gpus is not None:
            borrow = {g: math.floor(team.borrowing_limit_gpus * by_type[g] / capacity) for g in by_type}
        else:
            borrow = None  # may borrow whatever the cohort has unused
        spec: dict[str, Any] = {
            ("cohortName" if naming.api_version == "v1beta2" else "cohort"): naming.cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": naming.namespace(team.name)}},
            "queueingStrategy": "StrictFIFO" if policy.strict_fifo else "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": covered,
                                "flavors": _flavor_resources(quotas, borrow, by_type, host, naming)}],
            "preemption": _preemption(policy),
            "fairSharing": {"weight": f"{team.share:g}"},
        }
        out.append({"apiVersion": naming.group_version, "kind": "ClusterQueue",
                    "metadata": _meta(naming.cluster_queue(team.name), labels={"predictor/team": dns_name(team.name)}),
                    "spec": spec})
    return out


def local_queues(policy: ClusterPolicy, naming: KueueNaming = KueueNaming()) -> list[dict[str, Any]]:
    """One LocalQueue per team in the team's namespace (jobs carry ``kueue.x-k8s.io/queue-name``)."""
    return [{"apiVersion": naming.group_version, "kind": "LocalQueue",
             "metadata": _meta(naming.local_queue, namespace=naming.namespace(t.name)),
             "spec": {"clusterQueue": naming.cluster_queue(t.name)}} for t in policy.teams]


def all_manifests(policy: ClusterPolicy, inventory: Inventory,
                  naming: KueueNaming = KueueNaming()) -> list[dict[str, Any]]:
    """Every object, in the order to apply them (referenced objects first)."""
    return (priority_classes(policy, naming) + topology(inventory, naming) + resource_flavors(inventory, naming)
            + cluster_queues(policy, inventory, naming) + local_queues(policy, naming))


def residency_labels(node: Node, naming: KueueNaming | None = None) -> list[str]:
    """``name=value`` labels giving an inventory node its residency attributes, as
    ``predictor.adapters.kueue.selectors`` (rule *constraint to node labels*) selects on them."""
    naming = naming or KueueNaming()
    out = []
    for key, label in (("region", REGION_LABEL), ("site", ZONE_LABEL), ("pool", naming.pool_label)):
        value = getattr(node, key)
        if value:
            out.append(f"{label}={value}")
    out += [f"{feature}=true" for feature in node.features]
    out += [f"{name}={value}" for name, value in node.labels]
    return out


def node_label_commands(inventory: Inventory, naming: KueueNaming = KueueNaming()) -> list[list[str]]:
    """``kubectl label node`` commands giving each node the labels the flavors and Topology select on."""
    cmds = []
    for n in inventory.nodes:
        labels = []
        if n.gpu_type:
            labels.append(f"{naming.flavor_label}={n.gpu_type}")
        if n.rack:
            labels.append(f"{naming.rack_label}={n.rack}")
        if n.block:
            labels.append(f"{naming.block_label}={n.block}")
        labels += residency_labels(n, naming)  # docs/residency.md: what constraints select on
        if labels:
            cmds.append(["kubectl", "label", "node", n.name, "--overwrite", *labels])
    return cmds
