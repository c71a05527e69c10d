"""What cluster discovery hands on, whichever scheduler it read: nodes with the GPU type as the
cluster spells it, and the site's teams and priority classes; turned into the inventory YAML
(``predictor inventory``) and a starting policy (``predictor init``).

GPU types go through the vocabulary (:mod:`features.gpu_types`): ``a10`` (a Slurm gres type) and
``NVIDIA-A10`` (a Kubernetes node label) both become ``A10``, and the cluster's spelling is kept as
an alias of the type so job logs that use it resolve too. A family name that means several types
(``a100``: 40 or 80 GB) is resolved by the memory the node reports, else by ``--gpu-type a100=A100-80GB``.

Priority classes (Slurm QoS, Kubernetes PriorityClasses) map to the policy's tiers by name first
(``production``, or a name the shipped policy already aliases: ``high`` -> production), then by
words in the name (``debug``, ``interactive`` -> debug; ``low``, ``scavenger``, ``preempt``,
``standby``, ``spot`` -> best_effort; ``high``, ``prod``, ``urgent``, ``critical`` -> production),
then by their priority value: above a class that already means research (Slurm's ``normal``)
production, below it best_effort; without such a class the top third of the remaining classes
production, the bottom third best_effort, the rest research.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from features.errors import InputError
from features.gpu_types import DEFAULT_VOCABULARY, KNOWN_GPU_TYPES, normalise_gpu_name
from predictor.capacity.inventory_sources import inventory_from_mapping

__all__ = ["DiscoveredNode", "PriorityClass", "inventory_document", "tier_aliases_for", "site_policy_document",
           "parse_type_overrides"]


@dataclass(frozen=True, slots=True)
class DiscoveredNode:
    """One node as the cluster describes it (``gpu_label`` is the cluster's spelling of its GPU type)."""

    name: str
    gpu_label: str | None = None
    gpus: int = 0
    gpu_memory_mib: int | None = None
    cpus: int | None = None
    mem_mib: int | None = None
    rack: str | None = None
    block: str | None = None
    nvlink: bool = False  # all its GPUs on one NVLink / NVSwitch fabric
    # residency attributes (docs/residency.md)
    region: str | None = None
    site: str | None = None
    pool: str | None = None
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """A Slurm QoS or a Kubernetes (Workload)PriorityClass and its priority value."""

    name: str
    priority: float


def parse_type_overrides(items: Sequence[str] | None) -> dict[str, str]:
    """``["a100=A100-80GB"]`` (from ``--gpu-type``) -> ``{"a100": "A100-80GB"}``."""
    out: dict[str, str] = {}
    for item in items or ():
        label, sep, canonical = item.partition("=")
        if not sep or not label.strip() or not canonical.strip():
            raise InputError(f"--gpu-type: expected LABEL=TYPE (e.g. a100=A100-80GB), got {item!r}")
        out[label.strip()] = canonical.strip()
    return out


def _resolve_type(label: str, memory_mib: int | None, overrides: Mapping[str, str], where: str) -> str:
    if label in overrides:
        return DEFAULT_VOCABULARY.resolve(overrides[label], what=f"--gpu-type {label}=")[0]
    found = DEFAULT_VOCABULARY.matches(label)
    if len(found) > 1 and memory_mib:
        close = [t for t in found if abs(KNOWN_GPU_TYPES[t].memory_mib - memory_mib) <= 0.15 * memory_mib]
        found = tuple(close[:1]) if close else found
    if len(found) == 1:
        return found[0]
    if found:
        raise InputError(f"{where}: GPU type {label!r} may be {', '.join(found)}; say which with "
                         f"--gpu-type {label}={found[-1]}")
    raise InputError(f"{where}: unknown GPU type {label!r}; known: {', '.join(DEFAULT_VOCABULARY.known())} "
                     f"(say which it is with --gpu-type {label}=TYPE)")


def inventory_document(nodes: Sequence[DiscoveredNode], *, overrides: Mapping[str, str] | None = None,
                       origin: str = "cluster") -> dict[str, Any]:
    """The inventory YAML mapping for ``nodes`` (checked by loading it back).

    Raises
    ------
    InputError
        No node, a GPU type that cannot be placed, or an inventory the loader refuses.
    """
    if not nodes:
        raise InputError(f"{origin}: no nodes found")
    overrides = dict(overrides or {})
    types: dict[str, dict[str, Any]] = {}
    entries = []
    for node in sorted(nodes, key=lambda n: n.name):
        entry: dict[str, Any] = {"name": node.name}
        if node.gpus and node.gpu_label:
            canonical = _resolve_type(node.gpu_label, node.gpu_memory_mib, overrides, f"{origin}: node {node.name}")
            known = KNOWN_GPU_TYPES.get(canonical)
            spec = types.setdefault(canonical, {
                "memory_mib": int(node.gpu_memory_mib or (known.memory_mib if known else 0)),
                "cost_per_hour": known.cost_per_hour if known else 1.0, "aliases": []})
            if normalise_gpu_name(node.gpu_label) != normalise_gpu_name(canonical) and \
                    node.gpu_label not in spec["aliases"]:
                spec["aliases"].append(node.gpu_label)
            entry.update(gpu_type=canonical, gpus=int(node.gpus), nvlink_islands="all" if node.nvlink else "none")
        elif node.gpus:
            raise InputError(f"{origin}: node {node.name} has {node.gpus} GPUs of no stated type "
                             "(untyped gres): give the type in the node's gres (gpu:TYPE:N) or node label")
        for key in ("rack", "block", "cpus", "mem_mib", "region", "site", "pool"):
            value = getattr(node, key)
            if value is not None:
                entry[key] = value
        for key in ("partitions", "features"):  # residency: only what the cluster says
            if getattr(node, key):
                entry[key] = list(getattr(node, key))
        if node.labels:
            entry["labels"] = dict(node.labels)
        entries.append(entry)
    for spec in types.values():
        if not spec["aliases"]:
            del spec["aliases"]
    doc = {"gpu_types": dict(sorted(types.items())), "nodes": entries}
    inventory_from_mapping(doc, origin)  # what `predictor policy decide` and the service will load
    return doc


_WORD_TIERS = (
    (re.compile(r"debug|interactive"), "debug"),
    (re.compile(r"low|scavenge|preempt|standby|spot|best.?effort|backfill|free"), "best_effort"),
    (re.compile(r"high|prod|urgent|critical"), "production"),
)


def tier_aliases_for(classes: Sequence[PriorityClass], tiers: Sequence[str],
                     known_aliases: Mapping[str, str]) -> dict[str, str]:
    """Each class's tier (see the module docstring); classes named like a tier map to it implicitly."""
    out: dict[str, str] = {}
    rest: list[PriorityClass] = []
    for c in classes:
        if c.name in tiers:
            continue
        if c.name in known_aliases:
            out[c.name] = known_aliases[c.name]
            continue
        word = next((t for pattern, t in _WORD_TIERS if pattern.search(c.name.lower()) and t in tiers), None)
        if word:
            out[c.name] = word
        else:
            rest.append(c)
    anchors = [c.priority for c in classes if out.get(c.name, c.name) == "research"]
    if anchors:  # a class already means research (Slurm's "normal"): above it production, below best_effort
        for c in rest:
            tier = "production" if c.priority > max(anchors) else "best_effort" if c.priority < min(anchors) \
                else "research"
            out[c.name] = tier if tier in tiers else tiers[-1]
        return out
    ranked = sorted(rest, key=lambda c: (-c.priority, c.name))
    n = len(ranked)
    for i, c in enumerate(ranked):
        if n == 1 or (n == 2 and i == 1) or n // 3 <= i < n - n // 3:
            tier = "research"
        elif i < n // 3 or (n == 2 and i == 0):
            tier = "production"
        else:
            tier = "best_effort"
        out[c.name] = tier if tier in tiers else tiers[-1]
    return out


def site_policy_document(name: str, teams: Mapping[str, float], aliases: Mapping[str, str]) -> dict[str, Any]:
    """A policy file's contents: the site's teams (name -> fair-share) and its class -> tier aliases."""
    if not teams:
        raise InputError("no teams found on the cluster; name them with --team (repeatable)")
    return {"name": name, "tier_aliases": dict(sorted(aliases.items())),
            "teams": {t: {"share": float(s)} for t, s in sorted(teams.items())}}
