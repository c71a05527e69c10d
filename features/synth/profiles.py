"""Workload profiles: the knobs that make a synthetic history look like one published cluster.

A profile fixes the mixes (GPU types, models, tiers), the family-level duration model, the outcome
hazards and the queueing model. The numbers were tuned so that the generated summary lands near the
published row named by ``Profile.cluster`` (see :mod:`features.synth.calibrate` and
``docs/synth.md`` for the measured comparison); the published numbers themselves are in
:data:`PUBLISHED`.

Published statistics (:data:`PUBLISHED`) are copied from ``data/cluster_summary.csv`` of AcmeTrace
(InternLM/AcmeTrace, commit 6d6ac9cd, CC BY 4.0), the table behind Hu et al., "Characterization of
Large Language Model Development in the Datacenter", NSDI'24, Table 2. Units: seconds and GPUs
per job, rates as fractions of GPU jobs. They are bundled so a clone without ``../shared/data``
can still print the comparison; when the CSV is present it wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from features.errors import InputError

__all__ = ["Profile", "PROFILES", "PUBLISHED", "TIERS", "get_profile"]

TIERS: tuple[str, ...] = ("production", "debug", "sla", "research", "best_effort")

_PUBLISHED_FIELDS = ("avg_run_time_gpu", "med_run_time_gpu", "avg_que_time_gpu", "med_que_time_gpu",
                     "avg_gpu_num", "med_gpu_num", "complete_rate_gpu", "cancel_rate_gpu", "fail_rate_gpu",
                     "gpu_job_num")
#: Per-cluster published statistics (AcmeTrace cluster_summary.csv; None where the row is empty).
PUBLISHED: Mapping[str, Mapping[str, float | None]] = MappingProxyType({
    name: MappingProxyType(dict(zip(_PUBLISHED_FIELDS, row, strict=True)))
    for name, row in {
        "Seren": (1414.335, 122.0, 445.984, 1.0, 5.68, 1.0, 0.497, 0.075, 0.429, 663_813),
        "Kalos": (1259.689, 124.0, 214.179, 17.0, 26.77, 1.0, 0.541, 0.062, 0.397, 19_907),
        "Philly": (18006.055, 874.0, 3760.604, 189.0, 1.928, 1.0, 0.604, 0.09, 0.305, 112_956),
        "Helios": (6651.681, 206.0, 862.047, 0.0, 3.716, 1.0, 0.624, 0.221, 0.155, 1_580_464),
        "PAI": (4787.109, 480.667, 401.742, 9.0, 0.683, 0.5, None, None, None, 1_037_085),
    }.items()
})


@dataclass(frozen=True)
class Profile:
    """Every knob of the generator for one target cluster. Times in seconds unless named otherwise.

    Attributes
    ----------
    name, cluster, description
        Profile name, the ``cluster_summary.csv`` row it is calibrated to, one line on its origin.
    jobs_per_day
        Arrival rate used when no ``cluster_gpus`` is given (published GPU jobs / trace days).
    gpu_mix
        Relative share of each GPU type (names from :data:`features.synth.hardware.GPU_SPECS`).
    model_weights
        Relative frequency of each :data:`features.synth.zoo.MODEL_ZOO` entry among families.
    tier_mix
        Relative share of each tier in :data:`TIERS` among families.
    scale_out
        ``{factor: weight}``: data-parallel scale-out beyond the minimum GPUs a model needs.
    max_gpus
        Largest gang the cluster admits.
    log_duration_base
        Per tier, the log of a family's median duration (seconds) for a 100M-parameter model on one
        GPU; ``log_duration_per_decade`` / ``log_duration_per_doubling`` add per decade of
        parameters / doubling of the family's GPUs; ``log_duration_between_sd`` spreads families.
    within_family_sd
        Range of the per-family log-sd of run-to-run work (how predictable a family is).
    trial_share, trial_fraction
        Mean share of a family's runs that are short smoke tests, and their work fraction range.
    early_fail_share
        Mean per-family probability that a run dies at start-up (bad config, missing data).
    fail_per_hour
        Median per-family hazard of a crash while running (per hour of run time).
    node_fail_per_gpu_hour, preempt_per_hour
        Hardware-failure hazard per GPU-hour; preemption hazard per hour for ``best_effort``.
    cancel_share
        Mean per-user probability that a run is cancelled before it ends.
    default_limit_share
        Share of users who always request their queue's default time limit.
    limit_overestimate
        Median and log-sd of the factor other users multiply their expected run time by.
    wait_zero_share, wait_median, wait_log_sd
        Queueing: share of jobs that start at once; median and log-sd of the others' waits.
    oneoff_share
        Share of jobs that belong to no recurring family.
    jobs_per_family, family_popularity_sd
        Mean number of jobs per recurring family, and the log-sd of family popularity (how unequal
        family sizes are).
    """

    name: str
    cluster: str
    description: str
    jobs_per_day: float
    gpu_mix: Mapping[str, float]
    model_weights: tuple[float, ...]
    tier_mix: Mapping[str, float]
    scale_out: Mapping[int, float]
    max_gpus: int
    log_duration_base: Mapping[str, float]
    log_duration_per_decade: float
    log_duration_per_doubling: float
    log_duration_between_sd: float
    within_family_sd: tuple[float, float]
    trial_share: float
    trial_fraction: tuple[float, float]
    early_fail_share: float
    fail_per_hour: float
    node_fail_per_gpu_hour: float
    preempt_per_hour: float
    cancel_share: float
    default_limit_share: float
    limit_overestimate: tuple[float, float]
    wait_zero_share: float
    wait_median: float
    wait_log_sd: float
    oneoff_share: float = 0.08
    jobs_per_family: float = 30.0
    family_popularity_sd: float = 1.3
    finetune_by_size: Mapping[str, tuple[float, float, float]] = field(default_factory=lambda: {
        # (full, lora, qlora) by parameter band
        "<1B": (0.92, 0.08, 0.0), "1-4B": (0.55, 0.33, 0.12), "4-20B": (0.25, 0.45, 0.30),
        "20-100B": (0.12, 0.40, 0.48), ">100B": (0.05, 0.35, 0.60)})


# Zoo order: bert-base gpt2 vit-l bert-large gpt2-medium vit-h t5-large gpt2-large llama3.2-1b
# qwen2.5-1.5b gpt2-xl llama3.2-3b phi3-mini llama2-7b mistral-7b llama3.1-8b llama2-13b qwen2.5-14b
# qwen2.5-32b llama2-70b llama3.1-70b llama3.1-405b
_PHILLY = Profile(
    name="philly",
    cluster="Philly",
    description="Microsoft Philly (Jeon et al., ATC'19): mostly 1-GPU research jobs, long heavy tail, "
                "30% failures",
    jobs_per_day=112_956 / 75.0,  # GPU jobs over the trace's ~75 days (Oct-Dec 2017)
    gpu_mix={"V100": 0.15, "A10": 0.10, "L40S": 0.10, "A100-40GB": 0.25, "A100-80GB": 0.25, "H100-80GB": 0.15},
    model_weights=(14, 12, 8, 10, 8, 4, 5, 6, 5, 4, 3, 4, 3, 4, 3, 4, 1.5, 1.2, 0.8, 0.6, 0.6, 0.15),
    tier_mix={"production": 0.18, "debug": 0.17, "sla": 0.05, "research": 0.45, "best_effort": 0.15},
    scale_out={1: 0.84, 2: 0.08, 4: 0.05, 8: 0.03},
    max_gpus=128,
    log_duration_base={"production": 8.1, "debug": 6.1, "sla": 7.9, "research": 8.3, "best_effort": 7.9},
    log_duration_per_decade=0.45,
    log_duration_per_doubling=0.15,
    log_duration_between_sd=2.38,
    within_family_sd=(0.2, 0.7),
    trial_share=0.12,
    trial_fraction=(0.01, 0.1),
    early_fail_share=0.20,
    fail_per_hour=0.004,
    node_fail_per_gpu_hour=2e-5,
    preempt_per_hour=0.02,
    cancel_share=0.13,
    default_limit_share=0.45,
    limit_overestimate=(4.0, 0.8),
    wait_zero_share=0.15,
    wait_median=300.0,
    wait_log_sd=2.2,
    jobs_per_family=15.0,
    family_popularity_sd=1.0,
)

_HELIOS = Profile(
    name="helios",
    cluster="Helios",
    description="SenseTime Helios (Hu et al., SC'21): more multi-GPU jobs, many cancellations, most jobs "
                "start at once",
    jobs_per_day=1_580_464 / 183.0,  # GPU jobs over six months (Apr-Sep 2020), four clusters together
    gpu_mix={"V100": 0.25, "A10": 0.05, "L40S": 0.05, "A100-40GB": 0.20, "A100-80GB": 0.30, "H100-80GB": 0.15},
    model_weights=(10, 10, 8, 8, 7, 4, 4, 6, 5, 4, 3, 4, 3, 5, 3, 5, 2, 1.5, 1, 0.8, 0.8, 0.2),
    tier_mix={"production": 0.25, "debug": 0.22, "sla": 0.05, "research": 0.38, "best_effort": 0.10},
    scale_out={1: 0.68, 2: 0.08, 4: 0.10, 8: 0.09, 16: 0.035, 32: 0.015},
    max_gpus=512,
    log_duration_base={"production": 6.1, "debug": 3.9, "sla": 5.9, "research": 6.2, "best_effort": 5.9},
    log_duration_per_decade=0.45,
    log_duration_per_doubling=0.2,
    log_duration_between_sd=2.75,
    within_family_sd=(0.2, 0.7),
    trial_share=0.12,
    trial_fraction=(0.01, 0.1),
    early_fail_share=0.08,
    fail_per_hour=0.006,
    node_fail_per_gpu_hour=2e-5,
    preempt_per_hour=0.02,
    cancel_share=0.27,
    default_limit_share=0.45,
    limit_overestimate=(3.0, 0.8),
    wait_zero_share=0.55,
    wait_median=150.0,
    wait_log_sd=2.2,
    jobs_per_family=15.0,
    family_popularity_sd=1.0,
)

_BY_NAME: Mapping[str, Profile] = MappingProxyType({p.name: p for p in (_PHILLY, _HELIOS)})
#: Names of the built-in profiles.
PROFILES: tuple[str, ...] = tuple(_BY_NAME)


def get_profile(name: str) -> Profile:
    """The built-in profile called ``name`` (case-insensitive); InputError naming the choices otherwise."""
    key = str(name).strip().lower()
    if key not in _BY_NAME:
        raise InputError(f"unknown synthetic profile {name!r}; choose one of: {', '.join(PROFILES)}")
    return _BY_NAME[key]
