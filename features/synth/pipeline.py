"""Assemble a synthetic job history with known ground truth (the pipeline behind ``generate``).

Phases, each with its own random stream spawned from the seed (so the table is a pure function of
``n_jobs``, ``seed``, ``cluster_gpus``, ``target_load``, ``start_ts`` and ``profile``):

1. population and families (:mod:`.catalog`): who runs which model on which GPUs;
2. runs: each job's family, its config edits and true peak memory, out-of-memory when it exceeds
   the GPU (:func:`.catalog.vary_runs`);
3. speed and placement (:mod:`.topology_truth`): throughput on the best placement, comm
   intensity, the placement drawn and its slowdown;
4. work, true duration and end events (:mod:`.outcomes`);
5. time (:mod:`.arrivals`): trace span from the offered load, submit times, queue waits;
6. censoring at the end of the trace (the last submission: jobs not ended by then are RUNNING or
   PENDING, so no time in the table is later), names (:mod:`.naming`), measurement noise, the table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from features.errors import InputError
from features.schema import COLUMNS, PLACEMENT_CLASSES, STATES, conform
from features.synth import arrivals, catalog, naming, outcomes, topology_truth
from features.synth.hardware import (
    GPU_NAMES,
    GPU_SPECS,
    GPUS_PER_NODE,
    LINK_BANDWIDTH_GBPS,
    gpu_array,
    peak_tflops,
)
from features.synth.memory_truth import METHODS, OPTIMIZERS, PRECISIONS
from features.synth.profiles import TIERS, get_profile
from features.synth.zoo import zoo_array

__all__ = ["generate", "TRUTH_COLUMNS"]

#: Ground-truth columns added after the canonical ones.
TRUTH_COLUMNS: tuple[str, ...] = ("family", "true_duration_s", "true_slowdown", "comm_intensity",
                                  "true_peak_vram_mib") + tuple(f"true_slowdown_{c}" for c in PLACEMENT_CLASSES)
_STREAMS = ("population", "families", "assign", "runs", "placement", "timing", "work", "outcomes", "arrivals",
            "waits", "names", "measure", "deadlines")
_NVLINK_OVER_REF = LINK_BANDWIDTH_GBPS[PLACEMENT_CLASSES[-1]] / LINK_BANDWIDTH_GBPS[PLACEMENT_CLASSES[0]]


def _check_args(n_jobs, seed, cluster_gpus, target_load, start_ts) -> None:
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int | np.integer) or n_jobs < 1:
        raise InputError(f"n_jobs must be a positive integer, got {n_jobs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    if cluster_gpus is not None and (isinstance(cluster_gpus, bool) or not isinstance(cluster_gpus, int | np.integer)
                                     or cluster_gpus < 1):
        raise InputError(f"cluster_gpus must be a positive integer or None, got {cluster_gpus!r}")
    if isinstance(target_load, bool) or not (isinstance(target_load, int | float) and np.isfinite(target_load)
                                             and 0 < target_load <= 10):
        raise InputError(f"target_load must be in (0, 10], got {target_load!r}")
    if not (isinstance(start_ts, int | float) and np.isfinite(start_ts) and start_ts >= 0):
        raise InputError(f"start_ts must be a non-negative epoch time in seconds, got {start_ts!r}")


def _speed(fam: catalog.Families, rows: np.ndarray, *, batch, seq, gpu, num_gpus, precision):
    """Best-placement samples/s and comm intensity of runs of families ``rows`` with these configs."""
    params = zoo_array("params")[fam.model[rows]]
    full = fam.finetune[rows] == 0
    t_compute, t_comm_ref = topology_truth.step_times(
        params=params, trainable=np.where(full, params, params * fam.lora_fraction[rows]),
        grad_bytes=np.where(full & (precision >= PRECISIONS.index("fp16")), 2.0, 4.0), batch_size=batch, seq_len=seq,
        num_gpus=num_gpus, peak_tflops=peak_tflops(gpu, precision), mfu=fam.mfu[rows],
        flops_per_param_token=np.where(full, 6.0, 4.0) + np.where(fam.checkpointing[rows], 2.0, 0.0),
        zero_stage=np.where(num_gpus <= 1, 0, fam.zero_stage[rows]), exposed_share=fam.exposed_share[rows])
    samples_per_s = num_gpus * batch / (t_compute + t_comm_ref * _NVLINK_OVER_REF)
    return samples_per_s, topology_truth.comm_intensity(t_compute, t_comm_ref)


def generate(n_jobs: int, seed: int = 0, *, cluster_gpus: int | None = None, target_load: float = 0.85,
             start_ts: float = 1_735_689_600.0, profile: str = "philly",
             on_phase: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Generate a synthetic GPU training-job history with its ground truth.

    Parameters
    ----------
    n_jobs : int
        Number of jobs (rows).
    seed : int, default 0
        Same seed (and arguments) -> identical table.
    cluster_gpus : int, optional
        GPUs of the cluster the trace is for. When given, the trace spans
        ``total GPU-seconds / (target_load * cluster_gpus)`` so the offered load is ``target_load``;
        otherwise the profile's published arrival rate (jobs per day) sets the span.
    target_load : float, default 0.85
        Offered load (GPU-seconds demanded per second / ``cluster_gpus``); used with ``cluster_gpus``.
    start_ts : float, default 2025-01-01T00:00:00Z
        Start of the trace, epoch seconds.
    profile : str, default "philly"
        One of :data:`features.synth.PROFILES`.
    on_phase : callable, optional
        Called with a short phase name as generation proceeds (for progress display).

    Returns
    -------
    DataFrame of shape (n_jobs, len(features.schema.COLUMNS) + len(TRUTH_COLUMNS))
        Canonical columns (conformed, sorted by submit time) followed by :data:`TRUTH_COLUMNS`.
    """
    _check_args(n_jobs, seed, cluster_gpus, target_load, start_ts)
    prof = get_profile(profile)
    rng = dict(zip(_STREAMS, (np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(len(_STREAMS))),
                   strict=True))
    phase = on_phase or (lambda _name: None)

    phase("families")
    n = int(n_jobs)
    n_oneoff = int(round(prof.oneoff_share * n))
    n_rec = n - n_oneoff
    n_fam_rec = max(1, int(round(n_rec / prof.jobs_per_family)))
    pop = catalog.draw_population(rng["population"], n, prof)
    fam = catalog.draw_families(rng["families"], n_fam_rec + n_oneoff, pop, prof)
    popularity = rng["assign"].lognormal(0.0, prof.family_popularity_sd, n_fam_rec)
    fam_of_job = np.concatenate([rng["assign"].choice(n_fam_rec, n_rec, p=popularity / popularity.sum()),
                                 n_fam_rec + np.arange(n_oneoff)])
    recurring = fam_of_job < n_fam_rec

    phase("runs")
    runs = catalog.vary_runs(rng["runs"], fam, fam_of_job, prof)
    capacity = gpu_array("memory_mib")[runs.gpu]
    oom = runs.peak_mib > capacity
    all_fam = np.arange(len(fam))
    fam_speed, _ = _speed(fam, all_fam, batch=fam.batch, seq=fam.seq, gpu=fam.gpu, num_gpus=fam.num_gpus,
                          precision=fam.precision)
    speed, comm = _speed(fam, fam_of_job, batch=runs.batch, seq=runs.seq, gpu=runs.gpu, num_gpus=runs.num_gpus,
                         precision=runs.precision)
    nvlink_capable = np.array([GPU_SPECS[name].nvlink for name in GPU_NAMES])[runs.gpu]
    placement = topology_truth.sample_placement(rng["placement"], runs.num_gpus, nvlink_capable)
    slow = topology_truth.slowdown(comm, placement)

    phase("durations")
    tier = fam.tier[fam_of_job]
    timing = outcomes.draw_family_timing(rng["timing"], fam.tier, zoo_array("params")[fam.model], fam.num_gpus,
                                         pop.user_default_limit[fam.user], pop.user_overestimate[fam.user], prof)
    work = outcomes.draw_work(rng["work"], timing, fam_of_job, fam_speed, prof)
    true_duration = work / speed
    user = fam.user[fam_of_job]
    end = outcomes.draw_outcomes(rng["outcomes"], timing=timing, fam_of_job=fam_of_job, tier=tier,
                                 true_duration_s=true_duration, slowdown=slow, num_gpus=runs.num_gpus, oom=oom,
                                 cancel_share=pop.user_cancel[user], profile=prof)
    run_s = np.maximum(np.round(end.run_s), 1.0)

    phase("arrivals")
    gpu_seconds = float(np.sum(runs.num_gpus * run_s))
    span = gpu_seconds / (target_load * cluster_gpus) if cluster_gpus else n / prof.jobs_per_day * 86400.0
    span = max(span, 3600.0)
    submit = np.floor(arrivals.arrival_times(rng["arrivals"], fam_of_job, len(fam), recurring, float(start_ts), span))
    wait = arrivals.queue_waits(rng["waits"], runs.num_gpus, tier, submit, prof)
    log_end = float(submit.max())  # the log ends at its last submission: no recorded time is later

    phase("table")
    start = submit + wait
    pending = start >= log_end
    running = ~pending & (start + run_s > log_end)
    ended = ~pending & ~running
    state = np.where(pending, STATES.index("PENDING"), np.where(running, STATES.index("RUNNING"), end.state))
    duration = np.where(ended, run_s, np.where(running, log_end - start, np.nan))
    ran = ~pending
    trained = ran & end.started_training
    noise = np.exp(rng["measure"].normal(0.0, 0.02, n))
    peak_measured = np.where(oom & ran, capacity,
                             np.where(trained, np.minimum(np.round(runs.peak_mib * noise), capacity), np.nan))
    stems, template = naming.family_stems(rng["names"], fam.model, fam.finetune)
    names = naming.job_names(rng["names"], stems, template, fam_of_job, recurring, submit)
    expected = np.exp(timing.log_median_s[fam_of_job]) + prof.wait_median
    deadline = np.where(tier == TIERS.index("sla"),
                        submit + np.ceil(expected * rng["deadlines"].uniform(1.5, 4.0, n) / 900.0) * 900.0, np.nan)
    gpus = runs.num_gpus
    cross_node = placement >= PLACEMENT_CLASSES.index("cross_node_same_rack")
    by_class = topology_truth.slowdown_by_class(comm)
    team = pop.user_team[user]
    # text columns as (integer codes, vocabulary); -1 = null
    text = {
        "user": (user, pop.user_names),
        "team": (team, pop.team_names),
        "queue": (team, ["lq-" + t for t in pop.team_names]),
        "tier": (tier, TIERS),
        "gpu_type": (runs.gpu, GPU_NAMES),
        "precision": (runs.precision, PRECISIONS),
        "optimizer": (fam.optimizer[fam_of_job], OPTIMIZERS),
        "finetune_method": (fam.finetune[fam_of_job], METHODS),
        "state": (state, STATES),
        "placement_class": (np.where(ran, placement, -1), PLACEMENT_CLASSES),
        "source": (np.zeros(n, dtype=np.int64), [f"synth:{prof.name}"]),
    }
    numbers = {
        "num_gpus": gpus,
        "gpu_milli": np.full(n, 1000.0),
        "num_nodes": np.where(cross_node & (gpus <= GPUS_PER_NODE), 2.0, np.ceil(gpus / GPUS_PER_NODE)),
        "cpus": gpus * fam.cpus_per_gpu[fam_of_job],
        "mem_mib": gpus * fam.mem_per_gpu_mib[fam_of_job],
        "time_limit_s": end.limit_s,
        "deadline_ts": deadline,
        "checkpoint_interval_s": timing.checkpoint_s[fam_of_job],
        "model_params": zoo_array("params")[fam.model[fam_of_job]],
        "batch_size": runs.batch,
        "seq_len": runs.seq,
        "submit_ts": submit,
        "start_ts": np.where(ran, start, np.nan),
        "end_ts": np.where(ended, start + run_s, np.nan),
        "duration_s": duration,
        "censored": ~ended,
        "peak_vram_mib": peak_measured,
        "throughput": np.where(trained & ~oom, speed / (slow * end.jitter), np.nan),
        "true_duration_s": true_duration,
        "true_slowdown": np.where(ran, slow, np.nan),
        "comm_intensity": comm,
        "true_peak_vram_mib": runs.peak_mib,
    }
    for i, c in enumerate(PLACEMENT_CLASSES):
        numbers[f"true_slowdown_{c}"] = by_class[:, i]
    order = np.argsort(submit, kind="stable")
    censored = numbers.pop("censored")[order]
    floats = np.empty((len(numbers), n))  # one float block, gathered in place (no per-column copies)
    for row, values in enumerate(numbers.values()):
        np.take(values, order, out=floats[row])
    frame = pd.DataFrame(floats.T, columns=list(numbers), copy=False)
    frame["censored"] = censored
    for name, (codes, vocab) in text.items():
        frame[name] = _text(codes[order], vocab)
    frame["job_id"] = _numbered(f"s{int(seed)}-", np.arange(n))
    frame["job_name"] = pd.arrays.ArrowStringArray(pc.take(names, pa.array(order)))
    frame["family"] = _numbered("F", fam_of_job[order])
    return conform(frame)[[*COLUMNS, *TRUTH_COLUMNS]]


def _text(codes: np.ndarray, vocabulary) -> pd.arrays.ArrowStringArray:
    """String column from integer codes into a vocabulary (code -1 -> null), built in Arrow."""
    indices = pa.array(codes, mask=codes < 0)
    return pd.arrays.ArrowStringArray(
        pa.DictionaryArray.from_arrays(indices, pa.array(list(vocabulary), pa.string())).cast(pa.string()))


def _numbered(prefix: str, numbers: np.ndarray) -> pd.arrays.ArrowStringArray:
    """``prefix`` + the number zero-padded to seven digits, e.g. ``F0000042``."""
    digits = pc.utf8_lpad(pc.cast(pa.array(numbers), pa.string()), width=7, padding="0")
    return pd.arrays.ArrowStringArray(pc.binary_join_element_wise(prefix, digits, ""))
