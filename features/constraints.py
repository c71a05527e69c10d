"""Placement constraints: where a job may run (data residency, node pools, node labels).

One grammar for every source (rule *constraint form*, docs/residency.md). A constraint is a
conjunction of terms ``key=v1|v2`` joined by ``;``; a term holds on a node when the node's attribute
``key`` has one of the values. The canonical text (column ``constraints``) has its terms and values
sorted and deduplicated: ``label=sensitive;region=eu-west``. Keys:

``region``, ``site``, ``pool``
    the node's region, site (data centre) and node pool (inventory attributes);
``partition``
    one of the node's Slurm partitions;
``label``
    a tag the node carries (a Slurm node feature, or a Kubernetes label key whose value is ``true``);
``data_class``
    the data the job touches (``sensitive``); the policy's ``residency.data_classes`` says where
    each class may go (``predictor.policy.config``);
any other key (``topology.kubernetes.io/zone``, ``example.com/tier``)
    the node's label of that name equals the value (Kubernetes node labels).

Two terms on one key both hold (``region=eu;region=us`` holds nowhere): combining constraints
(:func:`combine_constraints`) never loses one. Readers turn Kubernetes node selectors
(:func:`constraint_from_node_selector`, :func:`constraint_from_node_affinity`) and Slurm
``--constraint`` feature expressions (:func:`constraint_from_slurm_features`) into this form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "NODE_KEYS",
    "Term",
    "parse_constraints",
    "format_constraints",
    "normalise_constraints",
    "combine_constraints",
    "constraint_from_node_selector",
    "constraint_from_node_affinity",
    "constraint_from_slurm_features",
]

#: Keys that name first-class node attributes (every other key is a node label name).
NODE_KEYS: tuple[str, ...] = ("region", "site", "pool", "partition", "label", "data_class")

#: Kubernetes node labels that mean a first-class attribute (the reader maps them).
WELL_KNOWN_LABELS: Mapping[str, str] = {
    "topology.kubernetes.io/region": "region",
    "failure-domain.beta.kubernetes.io/region": "region",
    "topology.kubernetes.io/zone": "site",
    "failure-domain.beta.kubernetes.io/zone": "site",
    "cloud.google.com/gke-nodepool": "pool",
    "eks.amazonaws.com/nodegroup": "pool",
    "karpenter.sh/nodepool": "pool",
    "kubernetes.azure.com/agentpool": "pool",
}

Term = tuple[str, frozenset[str]]

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*$")
_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-:/]*$")
_SLURM_FEATURE = re.compile(r"^[A-Za-z0-9_.\-:]+$")


def parse_constraints(text: Any) -> tuple[Term, ...]:
    """The terms of a constraint text, sorted (empty for null / blank).

    Raises
    ------
    ValueError
        A term is not ``key=value[|value...]``, or a key or value has characters outside
        letters, digits and ``_.-/`` (values also ``:``); the message names the term.
    """
    if text is None or (isinstance(text, float) and text != text):
        return ()
    if not isinstance(text, str):
        raise ValueError(f"constraints must be text like 'region=eu-west;label=sensitive', got {text!r}")
    terms: dict[tuple[str, frozenset[str]], None] = {}
    for raw in text.split(";"):
        part = raw.strip()
        if not part:
            continue
        key, sep, values = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"constraint term {part!r} is not key=value (e.g. region=eu-west)")
        if not _KEY.match(key):
            raise ValueError(f"constraint term {part!r}: bad key {key!r}")
        vals = frozenset(v.strip() for v in values.split("|") if v.strip())
        if not vals:
            raise ValueError(f"constraint term {part!r} names no value")
        bad = sorted(v for v in vals if not _VALUE.match(v))
        if bad:
            raise ValueError(f"constraint term {part!r}: bad value {bad[0]!r}")
        terms[(key, vals)] = None
    return tuple(sorted(terms, key=lambda t: (t[0], sorted(t[1]))))


def format_constraints(terms: Iterable[Term]) -> str | None:
    """Canonical text of terms (None when there are none)."""
    unique = sorted({(k, frozenset(v)) for k, v in terms}, key=lambda t: (t[0], sorted(t[1])))
    return ";".join(f"{k}={'|'.join(sorted(v))}" for k, v in unique) or None


def normalise_constraints(text: Any) -> str | None:
    """Canonical text of a constraint (ValueError naming the term when it is malformed)."""
    return format_constraints(parse_constraints(text))


def combine_constraints(*texts: Any) -> str | None:
    """The conjunction of constraints (every term of every one must hold); None when all are empty."""
    return format_constraints(t for text in texts for t in parse_constraints(text))


def _selector_term(key: str, values: Iterable[str]) -> Term | None:
    vals = frozenset(str(v).strip() for v in values if str(v).strip())
    if not vals:
        return None
    key = WELL_KNOWN_LABELS.get(key, key)
    if key not in NODE_KEYS and all(v.lower() == "true" for v in vals):
        return None if not _KEY.match(key) else ("label", frozenset([key]))
    if not _KEY.match(key) or any(not _VALUE.match(v) for v in vals):
        return None
    return key, vals


def constraint_from_node_selector(selector: Mapping[str, Any] | None, *, ignore: Iterable[str] = ()) -> str | None:
    """A Kubernetes ``nodeSelector`` as a constraint: well-known region and node-pool labels become
    ``region`` / ``pool`` terms, a label whose value is ``true`` a ``label`` tag, any other label
    ``name=value``. Keys in ``ignore`` (the GPU product labels, read as ``gpu_type``) are skipped,
    and so are keys or values outside the grammar."""
    if not selector:
        return None
    skip = set(ignore)
    terms = [t for k, v in selector.items() if isinstance(k, str) and k not in skip
             and (t := _selector_term(k, [v])) is not None]
    return format_constraints(terms)


def constraint_from_node_affinity(affinity: Mapping[str, Any] | None, *, ignore: Iterable[str] = (),
                                  keep: Callable[[str], bool] | None = None) -> str | None:
    """``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` as a constraint.

    Only what the grammar says exactly is taken: one ``nodeSelectorTerms`` entry whose
    ``matchExpressions`` use ``In`` (several terms are alternatives, which a conjunction cannot
    hold: they are left to Kubernetes). Preferred affinities are not constraints. ``keep``: read
    only the label keys it accepts.
    """
    node = (affinity or {}).get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    selector_terms = required.get("nodeSelectorTerms") or []
    if len(selector_terms) != 1:
        return None
    skip = set(ignore)
    terms = []
    for expr in selector_terms[0].get("matchExpressions") or []:
        key = expr.get("key")
        if expr.get("operator") != "In" or not isinstance(key, str) or key in skip or (keep and not keep(key)):
            continue
        term = _selector_term(key, expr.get("values") or [])
        if term is not None:
            terms.append(term)
    return format_constraints(terms)


def constraint_from_slurm_features(expression: Any) -> str | None:
    """A Slurm ``--constraint`` feature expression as ``label`` terms.

    ``&`` and ``,`` are AND (one term each), ``|`` is OR (one term with several values); matching-OR
    brackets ``[a|b]`` and counts ``a*2`` are read as plain OR and plain features (the count split
    is Slurm's to enforce). ``None``/empty -> None.

    Raises
    ------
    ValueError
        The expression has a feature name outside letters, digits and ``_.-:``.
    """
    if not isinstance(expression, str):
        return None
    text = expression.strip()
    if not text or text.lower() in ("(null)", "none"):
        return None
    text = text.replace("[", "").replace("]", "").replace("(", "").replace(")", "")
    terms = []
    for part in re.split(r"[&,]", text):
        values = [re.sub(r"\*\d+$", "", v.strip()) for v in part.split("|")]
        values = [v for v in values if v]
        if not values:
            continue
        bad = [v for v in values if not _SLURM_FEATURE.match(v)]
        if bad:
            raise ValueError(f"Slurm constraint {expression!r}: bad feature name {bad[0]!r}")
        terms.append(("label", frozenset(values)))
    return format_constraints(terms)
