"""What the doctor compares the cluster against: the policy (tiers, their other names, teams, shares,
weights), optionally the inventory the rules layer plans with, and optionally the job history
(the largest job each team ran, the GPU types jobs asked for).

GPU type names are compared through the vocabulary (:mod:`features.gpu_types`): every known type
plus the inventory's own types and aliases, so ``a10`` (a gres type), ``NVIDIA-A10`` (a node label)
and ``A10`` (the inventory) are one type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from features.errors import InputError
from features.gpu_types import KNOWN_GPU_TYPES, GpuTypeVocabulary, split_request
from features.job_tables import read_job_table
from predictor.adapters.cluster_policy import ClusterPolicy, TierSpec, cluster_policy_from_config
from predictor.capacity.inventory import Inventory

__all__ = ["LargestJob", "JobHistory", "Expectations", "load_expectations", "vocabulary_for", "SHARE_TOLERANCE",
           "out_of_proportion", "proportions"]

#: Relative difference between a cluster's proportion (of weights, of fair-share) and the policy's
#: beyond which the two disagree: 0.1 means 30 % against 33 % agrees, 25 % against 33 % does not.
SHARE_TOLERANCE = 0.10


def out_of_proportion(have: Mapping[str, float], want: Mapping[str, float]) -> list[str]:
    """Keys whose fraction of ``have``'s total differs from their fraction of ``want``'s by more than
    ``SHARE_TOLERANCE`` of the larger fraction; a key positive in one and zero in the other always does."""
    h_total, w_total = sum(have.values()), sum(want.values())
    out = []
    for key in have:
        h = have[key] / h_total if h_total else 0.0
        w = want.get(key, 0.0) / w_total if w_total else 0.0
        if (h > 0) != (w > 0) or abs(h - w) > SHARE_TOLERANCE * max(h, w):
            out.append(key)
    return out


def proportions(values: Mapping[str, float]) -> str:
    """``a:b:c (50%:30%:20%)`` of the values, in their order."""
    total = sum(values.values()) or 1.0
    return ":".join(f"{v:g}" for v in values.values()) + " (" + ":".join(
        f"{100 * v / total:.0f}%" for v in values.values()) + ")"


@dataclass(frozen=True, slots=True)
class LargestJob:
    """The job with the most GPUs a team ran (or asked for)."""

    job_id: str
    gpus: int


@dataclass(frozen=True)
class JobHistory:
    """What a job table says about demand: the largest job per team, and the GPU types jobs asked for
    (canonical names, with how many jobs asked for each)."""

    largest: Mapping[str, LargestJob] = field(default_factory=dict)
    requested_types: Mapping[str, int] = field(default_factory=dict)
    jobs: int = 0

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, vocabulary: GpuTypeVocabulary) -> JobHistory:
        """Read a canonical job table (``team``, ``num_gpus``, ``gpu_type``, ``job_id`` columns)."""
        missing = [c for c in ("job_id", "team", "num_gpus") if c not in frame]
        if missing:
            raise InputError(f"--jobs: the table lacks column(s) {', '.join(missing)} (a canonical job table)")
        largest: dict[str, LargestJob] = {}
        gpus = pd.to_numeric(frame["num_gpus"], errors="coerce")
        for job_id, team, n in zip(frame["job_id"], frame["team"], gpus, strict=True):
            if pd.isna(team) or pd.isna(n) or n <= 0:
                continue
            whole = int(math.ceil(float(n) - 1e-9))
            if team not in largest or whole > largest[team].gpus:
                largest[str(team)] = LargestJob(str(job_id), whole)
        types: dict[str, int] = {}
        for value in frame["gpu_type"].dropna() if "gpu_type" in frame else ():
            for name in split_request(str(value)):
                canonical = vocabulary.canonical_or_none(name) or name
                types[canonical] = types.get(canonical, 0) + 1
        return cls(largest=largest, requested_types=types, jobs=len(frame))


def vocabulary_for(inventory: Inventory | None) -> GpuTypeVocabulary:
    """Every known GPU type plus the inventory's types and aliases."""
    if inventory is None:
        return GpuTypeVocabulary(KNOWN_GPU_TYPES)
    return GpuTypeVocabulary({**KNOWN_GPU_TYPES, **inventory.gpu_types}, inventory.aliases)


@dataclass(frozen=True)
class Expectations:
    """The policy and what else was given; ``policy_file`` / ``inventory_file`` name the files in fix commands."""

    policy: ClusterPolicy
    tier_aliases: Mapping[str, str] = field(default_factory=dict)  # another name (QoS, class) -> tier
    vocabulary: GpuTypeVocabulary = field(default_factory=lambda: vocabulary_for(None))
    inventory: Inventory | None = None
    history: JobHistory | None = None
    policy_file: str | None = None
    inventory_file: str | None = None

    @property
    def available(self) -> tuple[str, ...]:
        """What checks may need beside the policy: ``jobs`` and ``inventory`` when given."""
        return tuple(n for n, v in (("jobs", self.history), ("inventory", self.inventory)) if v is not None)

    def names_of(self, tier: TierSpec) -> tuple[str, ...]:
        """The tier's own name, then every alias that points to it (what a QoS or class may be called)."""
        return (tier.name, *sorted(a for a, t in self.tier_aliases.items() if t == tier.name))

    def policy_option(self) -> str:
        """``--policy FILE`` for fix commands (empty for the shipped default policy)."""
        return f" --policy {self.policy_file}" if self.policy_file else ""

    def inventory_option(self) -> str:
        return f" --inventory {self.inventory_file or '<inventory.yaml>'}"


def load_expectations(policy: Path | None = None, inventory: str | None = None,
                      jobs: Path | None = None) -> Expectations:
    """Read the policy file (the shipped default when None), the inventory and the job table.

    Raises
    ------
    InputError
        A file that is missing or invalid, named with the field at fault.
    """
    from predictor.capacity.inventory_sources import load_inventory
    from predictor.policy.presets import load_policy  # the rules layer owns the file format

    cfg = load_policy(policy)
    inv = load_inventory(inventory) if inventory is not None else None
    vocabulary = vocabulary_for(inv)
    history = JobHistory.from_frame(read_job_table(jobs, "--jobs"), vocabulary) if jobs is not None else None
    return Expectations(policy=cluster_policy_from_config(cfg), tier_aliases=dict(cfg.tier_aliases),
                        vocabulary=vocabulary, inventory=inv, history=history,
                        policy_file=str(policy) if policy is not None else None, inventory_file=inventory)
