"""Residency constraints as Kubernetes node selection (docs/residency.md, *Adapters*).

Rule *constraint to node labels*: each term of a Decision's constraint (``features.constraints``)
becomes a node label requirement: ``region`` -> ``topology.kubernetes.io/region``, ``site`` ->
``topology.kubernetes.io/zone``, ``pool`` -> ``KueueNaming.pool_label``, ``data_class`` ->
``KueueNaming.data_class_label``, ``label=X`` -> ``X: "true"``, any other key -> itself.
``partition`` is Slurm's and has no Kubernetes form (left out, and said so). A single-valued term is
a ``nodeSelector`` entry; a term with alternatives is a required ``nodeAffinity`` ``In`` expression.
``node_label_commands`` (``manifests.residency_labels``) labels the nodes the same way, so the two
always agree.
"""

from __future__ import annotations

from typing import Any

from features.constraints import parse_constraints
from predictor.adapters.kueue.manifests import REGION_LABEL, ZONE_LABEL, KueueNaming

__all__ = ["node_requirements"]


def _label_of(key: str, naming: KueueNaming) -> str | None:
    return {"region": REGION_LABEL, "site": ZONE_LABEL, "pool": naming.pool_label,
            "data_class": naming.data_class_label, "partition": None}.get(key, key)


def node_requirements(constraint: str | None, naming: KueueNaming | None = None
                      ) -> tuple[dict[str, str], list[dict[str, Any]], list[str]]:
    """Rule *constraint to node labels*: (nodeSelector entries, nodeAffinity ``In`` expressions,
    terms with no Kubernetes form)."""
    naming = naming or KueueNaming()
    selector: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    skipped: list[str] = []
    for key, values in parse_constraints(constraint):
        if key == "label":
            if len(values) == 1:
                selector[next(iter(values))] = "true"
            else:  # one of several tags: a label that exists with value true
                skipped.append(f"label={'|'.join(sorted(values))}")
            continue
        label = _label_of(key, naming)
        if label is None:
            skipped.append(f"{key}={'|'.join(sorted(values))}")
        elif len(values) == 1 and label not in selector:
            selector[label] = next(iter(values))
        else:
            expressions.append({"key": label, "operator": "In", "values": sorted(values)})
    return selector, expressions, skipped
