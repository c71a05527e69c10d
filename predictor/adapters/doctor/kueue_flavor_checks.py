"""Doctor checks of a Kueue cluster's ResourceFlavors against its nodes: a flavor that selects nodes
of another GPU type (jobs land on the wrong GPUs), GPU nodes no flavor selects (their GPUs are never
admitted to), flavors no node carries, flavor quotas above the flavor's GPUs, and the inventory.

A flavor's GPU type is the first of its ``nodeLabels`` values that the vocabulary resolves (the
``nvidia.com/gpu.product`` label first), else its name (``a100-80gb``); a node's is its
``nvidia.com/gpu.product`` label, resolved the same way.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping

from predictor.adapters.doctor.expectations import Expectations
from predictor.adapters.doctor.findings import Check, Finding, Severity
from predictor.adapters.doctor.inventory_drift import inventory_drift
from predictor.adapters.doctor.kueue_picture import KueuePicture
from predictor.adapters.kueue.discovery import PRODUCT_LABEL

__all__ = ["FLAVOR_CHECKS", "flavor_gpu_types", "label_command"]


def flavor_gpu_types(pic: KueuePicture, exp: Expectations) -> dict[str, str | None]:
    """ResourceFlavor -> its canonical GPU type (None where neither its labels nor its name name one)."""
    out: dict[str, str | None] = {}
    for name, labels in pic.flavor_labels().items():
        keys = sorted(labels, key=lambda k: (k != PRODUCT_LABEL, k))
        found = next((c for k in keys if (c := exp.vocabulary.canonical_or_none(labels[k]))), None)
        out[name] = found or exp.vocabulary.canonical_or_none(name)
    return out


def label_command(node: str, labels: Mapping[str, str]) -> str:
    """``kubectl label node`` giving ``node`` every label of a flavor."""
    return shlex.join(["kubectl", "label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in sorted(labels.items()))])


def _apply_command(exp: Expectations) -> str:
    return f"predictor kueue apply{exp.policy_option()}{exp.inventory_option()}"


def _flavor_of_type(pic: KueuePicture, exp: Expectations) -> dict[str, str]:
    """canonical GPU type -> the (first by name) labelled flavor of that type."""
    out: dict[str, str] = {}
    labels = pic.flavor_labels()
    for name, gpu_type in sorted(flavor_gpu_types(pic, exp).items()):
        if gpu_type and labels[name]:
            out.setdefault(gpu_type, name)
    return out


def flavor_wrong_gpu(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A flavor that selects a node whose GPUs are another type: its workloads run on the wrong GPUs."""
    nodes, flavors, right = pic.node_gpus(), pic.flavor_labels(), _flavor_of_type(pic, exp)
    for flavor, gpu_type in sorted(flavor_gpu_types(pic, exp).items()):
        if not gpu_type:
            continue
        wrong = []
        for node in pic.selected_nodes(flavors[flavor]):
            product, count = nodes[node]
            other = exp.vocabulary.canonical_or_none(product) if product and count else None
            if other and other != gpu_type:
                wrong.append((node, product, other))
        if wrong and not flavors[flavor]:
            patch = json.dumps({"spec": {"nodeLabels": {pic.naming.flavor_label: gpu_type}}})
            yield Finding("kueue-flavor-wrong-gpu", Severity.ERROR, f"ResourceFlavor {flavor}",
                          f"{flavor} ({gpu_type}) has no nodeLabels, so its workloads land on any node: "
                          + ", ".join(f"{n} ({p})" for n, p, _ in wrong[:5]),
                          f"kubectl patch resourceflavor {flavor} --type merge -p {shlex.quote(patch)} and label "
                          f"its nodes {pic.naming.flavor_label}={gpu_type}")
            continue
        for node, product, other in wrong:
            fix = label_command(node, flavors[right[other]]) if other in right else shlex.join(
                ["kubectl", "label", "node", node, *(f"{k}-" for k in sorted(flavors[flavor]))])
            yield Finding("kueue-flavor-wrong-gpu", Severity.ERROR, f"node {node}",
                          f"ResourceFlavor {flavor} ({gpu_type}) selects {node} by "
                          + ", ".join(f"{k}={v}" for k, v in sorted(flavors[flavor].items()))
                          + f", but its GPUs are {product} ({other})", fix)


def _gpu_flavors(pic: KueuePicture, exp: Expectations) -> set[str]:
    """Flavors some ClusterQueue gives GPU quota in, and flavors of a known GPU type."""
    quoted = {q.flavor for cq in pic.of("ClusterQueue") for q in pic.gpu_quotas(cq)}
    return quoted | {f for f, t in flavor_gpu_types(pic, exp).items() if t}


def node_without_flavor(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A GPU node that no GPU flavor selects: Kueue never admits a workload to its GPUs."""
    flavors, right = pic.flavor_labels(), _flavor_of_type(pic, exp)
    selected = {n for f in _gpu_flavors(pic, exp) if f in flavors for n in pic.selected_nodes(flavors[f])}
    for node, (product, count) in sorted(pic.node_gpus().items()):
        if not count or node in selected:
            continue
        gpu_type = exp.vocabulary.canonical_or_none(product) if product else None
        fix = label_command(node, flavors[right[gpu_type]]) if gpu_type in right else (
            f"{_apply_command(exp)} (creates a ResourceFlavor per GPU type), then label the node")
        yield Finding("kueue-node-without-flavor", Severity.WARNING, f"node {node}",
                      f"{count} x {product or 'unlabelled GPU'} ({gpu_type or 'unknown type'}); no ResourceFlavor's "
                      "nodeLabels match the node's labels", fix)


def flavor_without_nodes(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A flavor whose nodeLabels match no node: workloads admitted to it never get a node."""
    types, nodes = flavor_gpu_types(pic, exp), pic.node_gpus()
    for flavor, labels in sorted(pic.flavor_labels().items()):
        if not labels or pic.selected_nodes(labels):
            continue
        quota = {cq["metadata"]["name"]: q.nominal for cq in pic.of("ClusterQueue") for q in pic.gpu_quotas(cq)
                 if q.flavor == flavor and q.nominal > 0}
        candidates = [n for n, (p, c) in sorted(nodes.items())
                      if c and types[flavor] and exp.vocabulary.canonical_or_none(p or "") == types[flavor]]
        fix = " && ".join(label_command(n, labels) for n in candidates[:8]) if candidates else (
            f"kubectl delete resourceflavor {flavor} (after removing it from the ClusterQueues that list it)")
        evidence = "nodeLabels " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) + " match no node"
        if quota:
            evidence += "; GPU quota in it: " + ", ".join(f"{q} ({n:g})" for q, n in sorted(quota.items()))
        yield Finding("kueue-flavor-without-nodes", Severity.ERROR if quota else Severity.WARNING,
                      f"ResourceFlavor {flavor}", evidence, fix)


def quota_over_capacity(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """ClusterQueues' nominal GPU quota in a flavor above the GPUs of the flavor's nodes: admitted pods stay Pending."""
    nodes = pic.node_gpus()
    for flavor, labels in sorted(pic.flavor_labels().items()):
        capacity = sum(nodes[n][1] for n in pic.selected_nodes(labels))
        quota = {cq["metadata"]["name"]: q.nominal for cq in pic.of("ClusterQueue") for q in pic.gpu_quotas(cq)
                 if q.flavor == flavor}
        if capacity and sum(quota.values()) > capacity:
            yield Finding("kueue-quota-over-capacity", Severity.WARNING, f"ResourceFlavor {flavor}",
                          " + ".join(f"{q} ({n:g})" for q, n in sorted(quota.items()))
                          + f" = {sum(quota.values()):g} nominal GPUs; the flavor's nodes have {capacity}",
                          f"{_apply_command(exp)} (quotas split within each flavor's GPUs)")


def kueue_inventory_drift(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    yield from inventory_drift(pic.node_gpus(), exp, "predictor inventory --from-kubernetes --out {out} --force")


FLAVOR_CHECKS: tuple[Check[KueuePicture, Expectations], ...] = (
    Check("kueue-flavor-wrong-gpu", "flavors selecting nodes of another GPU type", flavor_wrong_gpu),
    Check("kueue-node-without-flavor", "GPU nodes no flavor selects", node_without_flavor),
    Check("kueue-flavor-without-nodes", "flavors no node carries", flavor_without_nodes),
    Check("kueue-quota-over-capacity", "flavor quotas above the flavor's GPUs", quota_over_capacity),
    Check("inventory-drift", "the inventory against the nodes", kueue_inventory_drift, needs=("inventory",)),
)
