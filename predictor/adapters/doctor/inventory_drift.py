"""The doctor check both targets share: the inventory the rules layer plans with against the GPU nodes
the cluster has. GPU types are compared through the vocabulary (``a10`` and ``A10`` agree)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from predictor.adapters.doctor.expectations import Expectations
from predictor.adapters.doctor.findings import Finding, Severity

__all__ = ["inventory_drift"]


def inventory_drift(live: Mapping[str, tuple[str | None, int]], exp: Expectations, refresh: str) -> Iterator[Finding]:
    """Findings for ``live`` (node -> (GPU type as the cluster spells it, GPUs)) against ``exp.inventory``.

    ``refresh`` is the command that rewrites the inventory from the cluster.
    """
    if exp.inventory is None:
        return
    planned = {n.name: n for n in exp.inventory.nodes if n.num_gpus}
    fix = refresh.format(out=exp.inventory_file or "inventory.yaml")
    for name, (label, gpus) in sorted(live.items()):
        if not gpus:
            continue
        node = planned.get(name)
        if node is None:
            yield Finding("inventory-drift", Severity.WARNING, f"node {name}",
                          f"the cluster has {gpus} x {label or 'untyped'} GPUs on {name}; the inventory lacks the node",
                          fix)
            continue
        canonical = exp.vocabulary.canonical_or_none(label) if label else None
        if (canonical or label) != node.gpu_type or gpus != node.num_gpus:
            yield Finding("inventory-drift", Severity.WARNING, f"node {name}",
                          f"the cluster has {gpus} x {label or 'untyped'} ({canonical or 'unknown type'}); the "
                          f"inventory plans {node.num_gpus} x {node.gpu_type}", fix)
    for name, node in sorted(planned.items()):
        if live.get(name, (None, 0))[1] == 0:
            yield Finding("inventory-drift", Severity.WARNING, f"node {name}",
                          f"the inventory plans {node.num_gpus} x {node.gpu_type} on {name}; the cluster has no GPUs "
                          "there (no such node, or no GPU gres/labels)", fix)
