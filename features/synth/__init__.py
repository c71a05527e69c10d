"""Synthetic GPU training-job histories with known ground truth.

``generate(n_jobs, seed)`` returns the canonical job table (:mod:`features.schema`) plus the truth a
model should recover: the job's family, its duration on the best placement, the slowdown of the
placement it ran on (and of every class), its communication intensity and its peak GPU memory
before measurement noise. Profiles calibrate it to a published cluster; ``calibration_report``
prints how close it lands. The generative model is documented module by module:

* :mod:`.zoo`, :mod:`.hardware`: models (110M-405B) and GPUs/links with their sources;
* :mod:`.memory_truth`: peak memory (ZeRO model states, Korthikanti activations, fragmentation);
* :mod:`.topology_truth`: step time, comm intensity, placement slowdown;
* :mod:`.catalog`: teams, users, families and how they size GPU requests;
* :mod:`.outcomes`: work, durations, time limits, failures, cancellations;
* :mod:`.arrivals`: diurnal/weekly arrivals, family activity windows, queueing;
* :mod:`.naming`: job names; :mod:`.profiles`: knobs and published numbers; :mod:`.pipeline` (the generator).
"""

from features.synth.calibrate import (
    DEFAULT_SUMMARY_PATH,
    TOLERANCES,
    calibration_report,
    published_stats,
    summarize,
)
from features.synth.hardware import GPU_SPECS, LINK_BANDWIDTH_GBPS
from features.synth.memory_truth import analytic_peak_vram_mib, true_peak_vram_mib
from features.synth.pipeline import TRUTH_COLUMNS, generate
from features.synth.profiles import PROFILES, PUBLISHED, TIERS, Profile, get_profile
from features.synth.topology_truth import slowdown, slowdown_by_class
from features.synth.zoo import MODEL_ZOO

__all__ = [
    "generate",
    "TRUTH_COLUMNS",
    "PROFILES",
    "PUBLISHED",
    "TIERS",
    "Profile",
    "get_profile",
    "calibration_report",
    "published_stats",
    "summarize",
    "TOLERANCES",
    "DEFAULT_SUMMARY_PATH",
    "analytic_peak_vram_mib",
    "true_peak_vram_mib",
    "slowdown",
    "slowdown_by_class",
    "GPU_SPECS",
    "LINK_BANDWIDTH_GBPS",
    "MODEL_ZOO",
]
