"""Residency rules of the policy: where each team's and each data class's jobs may run (docs/residency.md).

The ``residency`` section of the policy file::

    residency:
      teams:                       # every job of the team obeys this constraint
        genomics: region=eu-west
      data_classes:                # a job that declares the data class obeys this constraint
        sensitive: {label: sensitive, region: [eu-west, eu-central]}
      unknown_data_class: node_label
      queue_is_partition: false    # true: a job's queue (Slurm partition) is a partition= term

A constraint is a text in the grammar of ``features.constraints`` or a mapping ``{key: value or
[values]}``; both are validated when the policy is loaded, with the field named in the error.

Rule *effective constraint*: a job obeys its own constraint, its team's, and for each data class it
declares (its ``data_class=`` terms) that class's. A data class the policy does not list is, with
``unknown_data_class: node_label`` (the default, which fails closed), a plain term: only nodes
labelled ``data_class=<class>`` qualify; with ``ignore`` it places no restriction. With
``queue_is_partition`` a job's queue (its Slurm partition) adds a ``partition=<queue>`` term: it runs
only on the inventory nodes listed in that partition.

The effective constraints of a cycle's pending jobs are resolved once per (job constraint, team)
pair and policy, and their node masks once per layout (``predictor.capacity.eligibility``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from features.constraints import (
    combine_constraints,
    format_constraints,
    normalise_constraints,
    parse_constraints,
)
from predictor.capacity.eligibility import NodeEligibility

__all__ = ["ResidencyConfig", "cycle_eligibility"]


def _constraint_text(value: Any) -> str:
    if isinstance(value, dict):
        parts = []
        for key, vals in value.items():
            vals = vals if isinstance(vals, list | tuple) else [vals]
            parts.append(f"{key}={'|'.join(str(v) for v in vals)}")
        value = ";".join(parts)
    if not isinstance(value, str):
        raise ValueError("must be a constraint text like 'region=eu-west;label=sensitive' or a mapping "
                         "{key: value or [values]}")
    text = normalise_constraints(value)
    if text is None:
        raise ValueError("an empty constraint restricts nothing; remove the entry")
    return text


class ResidencyConfig(BaseModel):
    """The ``residency`` section (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    teams: dict[str, str] = Field(default_factory=dict, description="team -> constraint its jobs obey")
    data_classes: dict[str, str] = Field(default_factory=dict, description=(
        "data class -> constraint the jobs that declare it obey"))
    unknown_data_class: Literal["node_label", "ignore"] = Field("node_label", description=(
        "a data class not listed: only nodes labelled data_class=<class> (node_label), or no restriction (ignore)"))
    queue_is_partition: bool = Field(False, description=(
        "a job's queue is a Slurm partition it must run in (nodes list their partitions in the inventory)"))

    @field_validator("teams", "data_classes", mode="before")
    @classmethod
    def _constraints(cls, v: Any) -> dict[str, str]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError("must be a mapping of name -> constraint")
        out = {}
        for name, value in v.items():
            try:
                out[str(name)] = _constraint_text(value)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return out

    def effective(self, own: str | None, team: str | None, queue: str | None = None) -> str | None:
        """Rule *effective constraint* of a job with constraint ``own`` in ``team`` and ``queue``."""
        terms = []
        for key, values in parse_constraints(own):
            if key != "data_class":
                terms.append((key, values))
                continue
            for cls in sorted(values):
                rule = self.data_classes.get(cls)
                if rule is not None:
                    terms.extend(parse_constraints(rule))
                elif self.unknown_data_class == "node_label":
                    terms.append(("data_class", frozenset([cls])))
        if self.queue_is_partition and queue:
            terms.append(("partition", frozenset([queue])))
        return combine_constraints(format_constraints(terms), self.teams.get(team) if team is not None else None)


_RESOLVED: dict[int, tuple[ResidencyConfig, dict[tuple[object, object, object], str | None]]] = {}


def cycle_eligibility(layout, pending, teams: tuple[str, ...], residency: ResidencyConfig,
                      queues: tuple[str, ...] = ()) -> NodeEligibility | None:
    """The pending jobs' node eligibility under ``residency`` (None when nobody is constrained)."""
    own = pending.constraint
    if own is None and not residency.teams and not residency.queue_is_partition:
        return None
    hit = _RESOLVED.get(id(residency))
    if hit is None or hit[0] is not residency:
        if len(_RESOLVED) > 64:
            _RESOLVED.clear()
        hit = _RESOLVED[id(residency)] = (residency, {})
    cache = hit[1]
    n = len(pending)
    own_list = own.tolist() if own is not None else [None] * n
    team_codes = pending.team.tolist()
    queue_codes = pending.queue.tolist() if residency.queue_is_partition else [-1] * n
    out = np.full(n, None, dtype=object)
    for i, (text, code, q) in enumerate(zip(own_list, team_codes, queue_codes, strict=True)):
        team = teams[code] if code >= 0 else None
        key = (text, team if team in residency.teams else None, queues[q] if q >= 0 else None)
        if key == (None, None, None):
            continue
        got = cache.get(key, "")
        if got == "":
            got = cache[key] = residency.effective(*key)
        out[i] = got
    return NodeEligibility.of(layout, out)
