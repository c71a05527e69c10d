"""Residency constraints as Slurm job features and partitions (docs/residency.md, *Adapters*).

Rule *constraint to Slurm features*: ``label`` terms are Slurm node features; ``region``, ``site``,
``pool`` and ``data_class`` values are node features of the same name (label the nodes so:
``Features=eu-west,fra1,...`` in ``slurm.conf``); terms AND with ``&``, alternatives OR with ``|``
inside matching-OR brackets when the expression has several terms (``eu-west&[ib|roce]``).
``partition`` terms become the job's partition list. Other keys (Kubernetes node labels) have no
Slurm form and are left out, and said so. The job's own ``--constraint`` is kept: the update ANDs
what the decision needs onto it, and nothing is written when it already says as much.
"""

from __future__ import annotations

from features.constraints import Term, constraint_from_slurm_features, parse_constraints

__all__ = ["slurm_requirements", "feature_expression"]

_FEATURE_KEYS = ("label", "region", "site", "pool", "data_class")


def slurm_requirements(constraint: str | None) -> tuple[list[Term], frozenset[str] | None, list[str]]:
    """(feature terms, allowed partitions or None, terms with no Slurm form) of a constraint."""
    features: list[Term] = []
    partitions: frozenset[str] | None = None
    skipped: list[str] = []
    for key, values in parse_constraints(constraint):
        if key in _FEATURE_KEYS:
            features.append(("label", values))
        elif key == "partition":
            partitions = values if partitions is None else partitions & values
        else:
            skipped.append(f"{key}={'|'.join(sorted(values))}")
    return features, partitions, skipped


def feature_expression(terms: list[Term]) -> str:
    """A Slurm ``--constraint`` expression of feature terms (see the module docstring)."""
    unique = sorted({(k, frozenset(v)) for k, v in terms}, key=lambda t: sorted(t[1]))
    parts = ["|".join(sorted(v)) for _, v in unique]
    if len(parts) > 1:
        parts = [f"[{p}]" if "|" in p else p for p in parts]
    return "&".join(parts)


def features_update(current: str | None, constraint: str | None) -> str | None:
    """The job's new feature expression, or None when its current one already requires the terms."""
    terms, _, _ = slurm_requirements(constraint)
    if not terms:
        return None
    try:
        have = set(parse_constraints(constraint_from_slurm_features(current)))
    except ValueError:
        have = set()
    want = {(k, frozenset(v)) for k, v in terms}
    if want <= have:
        return None
    return feature_expression([*have, *want])
