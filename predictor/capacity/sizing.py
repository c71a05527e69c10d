"""GPU sizing: which GPU types (flavors) a job may run on, from its predicted peak memory.

Rule *flavor from memory*: a job needs ``need = upper x (1 + margin_fraction) + margin_mib`` MiB per
GPU, where ``upper`` is the predicted upper bound of its peak memory per GPU. A GPU type holds it
when ``memory_mib x gpu_milli / 1000 >= need`` (a GPU share gets the same share of the memory, as in
the openb cluster). Among the types the cluster has enough of for the gang, the job's *flavor* is
the cheapest one (cost per GPU-hour, then memory) that holds it and that it requested; the GPU
count is the one requested (data-parallel jobs keep their per-GPU memory whatever the count).

Warnings:

* *too small (OOM risk)*: the requested type(s) cannot hold the need. With
  ``sizing.on_too_small = upsize`` the job is moved to the cheapest type that can; with ``keep``
  it keeps its request and the warning stands.
* *wastes capacity*: the request forces a type costlier than the cheapest that holds the need, and
  that type has ``waste_ratio`` times the memory needed.
* *fits nowhere*: no type of the cluster holds the need; the job keeps its request (the prediction
  may be wrong) but runs on the largest-memory type(s) of it (the smallest OOM risk), and the
  warning says how many of the largest GPUs a sharded run would need.

*Node eligibility* (docs/residency.md): a constrained job counts only the GPUs of each type on the
nodes its constraint allows; a job left with no type is flagged ``constrained`` (it can never run
here, and its decision names the constraint).

Rule *start below the bound* (``sizing.start_below_bound``, on by default): the upper bound is
conservative (above nine peaks in ten), so on a cluster of several GPU types it would keep jobs
queued for the largest type while smaller GPUs idle. A job that cannot start now on a type that holds
the bound may start now on a free type it asked for that holds its *point* estimate (with the same
margins; ``sizing.below_bound_point_fraction`` of it, 1 by default): an out-of-memory risk taken only
with GPUs that would otherwise idle. Reservations and
preemption stay on the types that hold the bound, and a job whose memory a crash has taught is sized
by what it learnt, with no point estimate left (the replay, ``JobSizing.update``; ``SizingOutcome.below``).

Sizing by prediction is skipped (request kept, warnings still computed) when
``sizing.use_predictions`` is false, and for jobs without a memory prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from predictor.capacity.eligibility import NodeEligibility
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.capacity.requests import requested_types

__all__ = ["SizingConfig", "SizingOutcome", "size_jobs", "size_request", "describe_sizing"]


class SizingConfig(BaseModel):
    """The ``sizing`` section of the policy file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    use_predictions: bool = Field(True, description="choose the GPU flavor from predicted peak memory")
    margin_fraction: float = Field(0.1, ge=0, le=10, description="memory headroom, fraction of the upper bound")
    margin_mib: float = Field(1024.0, ge=0, description="memory headroom, MiB, added to the fraction")
    on_too_small: Literal["upsize", "keep"] = Field("upsize", description=(
        "when the requested GPU type cannot hold the predicted peak: move the job to a type that can "
        "(upsize) or keep the request and only warn (keep)"))
    waste_ratio: float = Field(2.0, gt=1, description="warn when the GPU holds this many times the need")
    start_below_bound: bool = Field(True, description=(
        "when no GPU of a type that holds the predicted upper bound is free for a job, it may start now "
        "on a free type it asked for that holds its point estimate (an out-of-memory risk the idle GPUs "
        "pay for; reservations and preemption stay on the types that hold the bound)"))
    below_bound_point_fraction: float = Field(1.0, ge=0, le=1, description=(
        "rule start below the bound: the share of the point estimate (with the margins) a type must "
        "hold to take the job (1: all of it; 0: any free type it asked for)"))



@dataclass(frozen=True, eq=False)
class SizingOutcome:
    """Sizing of n jobs against one layout.

    Attributes
    ----------
    allowed : ndarray of bool, shape (n_jobs, n_types)
        Types each job may run on (layout codes, cheapest first).
    flavor : ndarray of int64, shape (n_jobs,)
        Cheapest allowed type; ``-1`` when the job can never run on this cluster.
    need_mib : ndarray of float64
        Memory needed per GPU (upper bound plus margins); NaN when not predicted.
    too_small, wasteful, fits_nowhere, requested_missing : ndarray of bool
        Warning flags (see the module docstring); ``requested_missing``: no requested type exists
        in the cluster in the number the gang needs.
    constrained : ndarray of bool or None
        The job's constraint leaves it no type it could otherwise run on (None: nobody is constrained).
    below : ndarray of bool, shape (n_jobs, n_types), or None
        Rule *start below the bound*: types the job asked for (with room for its gang) that hold its
        predicted point estimate but not its upper bound, and are not ``allowed``; it may start on
        one of them now, never reserve or preempt there. None: no job has one (the rule is off, or
        no point estimate was given).
    """

    allowed: np.ndarray
    flavor: np.ndarray
    need_mib: np.ndarray
    too_small: np.ndarray
    wasteful: np.ndarray
    fits_nowhere: np.ndarray
    requested_missing: np.ndarray
    constrained: np.ndarray | None = None
    below: np.ndarray | None = None


def size_jobs(layout: ClusterLayout, cfg: SizingConfig, *, num_gpus: np.ndarray, gpu_milli: np.ndarray,
              peak_upper_mib: np.ndarray, requested_types: np.ndarray | None,
              eligibility: NodeEligibility | None = None, peak_point_mib: np.ndarray | None = None) -> SizingOutcome:
    """Size every job at once (see the module docstring for the rules).

    Parameters
    ----------
    layout : ClusterLayout
    cfg : SizingConfig
    num_gpus, gpu_milli : ndarray of int, shape (n_jobs,)
    peak_upper_mib : ndarray of float, shape (n_jobs,)
        Predicted upper bound of peak memory per GPU; NaN when unknown.
    requested_types : ndarray of bool, shape (n_jobs, n_types), or None for "any type"
    eligibility : NodeEligibility, optional
        The jobs' constraints (rule *node eligibility*).
    peak_point_mib : ndarray of float, shape (n_jobs,), optional
        Predicted peak memory per GPU (the point estimate), for rule *start below the bound*; NaN or
        None where unknown (no type below the bound then).

    Returns
    -------
    SizingOutcome
    """
    n, t = len(num_gpus), layout.n_types
    need = peak_upper_mib * (1.0 + cfg.margin_fraction) + cfg.margin_mib
    known = np.isfinite(need)
    count_ok = layout.gpus_of_type()[None, :] >= num_gpus[:, None]
    constrained = None
    if eligibility is not None:  # rule *node eligibility*: only the GPUs its constraint allows count
        unconstrained_ok = count_ok
        count_ok = count_ok & eligibility.type_allows(num_gpus)
        req0 = unconstrained_ok if requested_types is None else unconstrained_ok & requested_types
        constrained = req0.any(axis=1) & ~(count_ok if requested_types is None else count_ok & requested_types).any(axis=1)
    if not known.any() and requested_types is None:  # nothing to size by: any type with room for the gang
        allowed = count_ok
        none = np.zeros(n, dtype=bool)
        any_allowed = allowed.any(axis=1)
        return SizingOutcome(allowed=allowed, flavor=np.where(any_allowed, np.argmax(allowed, axis=1), -1),
                             need_mib=need, too_small=none, wasteful=none, fits_nowhere=none,
                             requested_missing=~any_allowed & (True if constrained is None else ~constrained),
                             constrained=constrained)
    capacity = layout.type_memory_mib[None, :] * (gpu_milli[:, None] / MILLI)
    fits = ~(need[:, None] > capacity)  # NaN need -> fits everywhere
    req = np.ones((n, t), dtype=bool) if requested_types is None else requested_types
    has_request = ~req.all(axis=1) if t else np.zeros(n, dtype=bool)
    req_ok = req & count_ok
    fit_ok = fits & count_ok

    fits_nowhere = known & ~fit_ok.any(axis=1)
    too_small = known & has_request & req_ok.any(axis=1) & ~(req_ok & fits).any(axis=1)
    if cfg.use_predictions:
        allowed = req_ok & fits
        if cfg.on_too_small == "upsize":
            allowed = np.where((too_small & ~fits_nowhere)[:, None], fit_ok, allowed)
        keep = req_ok
        if t:  # fits nowhere: keep the request, on its largest GPUs (the smallest OOM risk)
            cap_req = np.where(req_ok, capacity, -np.inf)
            largest = req_ok & (cap_req >= cap_req.max(axis=1, keepdims=True))
            keep = np.where(fits_nowhere[:, None], largest, req_ok)
        allowed = np.where((~allowed.any(axis=1))[:, None], keep, allowed)
    else:
        allowed = req_ok
    below = None
    if cfg.use_predictions and cfg.start_below_bound and peak_point_mib is not None and t > 1:
        point_need = np.asarray(peak_point_mib, dtype=np.float64) * (1.0 + cfg.margin_fraction) + cfg.margin_mib
        # NaN point: no type below the bound (NaN compares false), whatever the fraction
        below = req_ok & (cfg.below_bound_point_fraction * point_need[:, None] <= capacity) & ~allowed
        below &= np.isfinite(point_need)[:, None]
        if not below.any():
            below = None
    any_allowed = allowed.any(axis=1)
    flavor = np.where(any_allowed, np.argmax(allowed, axis=1), -1).astype(np.int64)
    cheapest_fit = np.where(fit_ok.any(axis=1), np.argmax(fit_ok, axis=1), t)
    flavor_mem = layout.type_memory_mib[np.maximum(flavor, 0)] * (gpu_milli / MILLI) if t else np.zeros(n)
    wasteful = known & has_request & any_allowed & (cheapest_fit < flavor) & (flavor_mem >= cfg.waste_ratio * need)
    return SizingOutcome(
        allowed=allowed, flavor=flavor, need_mib=np.where(known, need, np.nan), too_small=too_small,
        wasteful=wasteful, fits_nowhere=fits_nowhere,
        requested_missing=~req_ok.any(axis=1) & (True if constrained is None else ~constrained),
        constrained=constrained, below=below,
    )


def describe_sizing(layout: ClusterLayout, outcome: SizingOutcome, i: int, *, num_gpus: int, gpu_milli: int,
                    peak_upper_mib: float, requested: np.ndarray | None,
                    request_text: str | None = None) -> tuple[str, ...]:
    """The warnings for job ``i`` of ``outcome`` as sentences a person can act on (``request_text``:
    the GPU request as written, named when none of its types is in the cluster)."""
    out: list[str] = []
    need = outcome.need_mib[i]
    names = layout.gpu_types
    if outcome.requested_missing[i]:
        asked = [names[k] for k in np.flatnonzero(requested)] if requested is not None else list(names)
        if asked:
            out.append(f"the cluster has no {num_gpus} GPUs of requested type(s) {', '.join(asked)}")
        else:
            out.append(f"the cluster has no GPU of the requested type {request_text or '(none given)'} "
                       f"(it has {', '.join(names) or 'no GPUs'})")
    if outcome.fits_nowhere[i]:
        biggest = int(np.argmax(layout.type_memory_mib)) if layout.n_types else -1
        if biggest >= 0:
            mem = layout.type_memory_mib[biggest]
            shards = int(np.ceil(peak_upper_mib * num_gpus / mem))
            out.append(f"predicted peak {peak_upper_mib:,.0f} MiB per GPU (+margin: {need:,.0f}) fits no GPU type "
                       f"here (largest {names[biggest]}, {mem:,.0f} MiB): OOM risk; a sharded run needs "
                       f">= {shards} x {names[biggest]}")
    elif outcome.too_small[i]:
        asked = [names[k] for k in np.flatnonzero(requested)] if requested is not None else []
        flavor = names[outcome.flavor[i]] if outcome.flavor[i] >= 0 else "none"
        moved = not (requested is not None and requested[outcome.flavor[i]]) if outcome.flavor[i] >= 0 else False
        tail = f"; moved to {flavor}" if moved else "; kept as requested"
        out.append(f"requested {'/'.join(asked)} is too small: predicted peak {peak_upper_mib:,.0f} MiB "
                   f"(+margin {need:,.0f} MiB per GPU{'' if gpu_milli >= MILLI else ' share'}): OOM risk{tail}")
    if outcome.wasteful[i]:
        flavor = names[outcome.flavor[i]]
        cheaper = [names[k] for k in range(outcome.flavor[i])
                   if layout.type_memory_mib[k] * gpu_milli / MILLI >= need]
        out.append(f"request for {flavor} wastes capacity: predicted need {need:,.0f} MiB per GPU fits on "
                   f"cheaper {', '.join(cheaper)}")
    return tuple(out)


@dataclass(frozen=True)
class SizingAdvice:
    """Sizing of one job: flavor (None if it can never run), GPU count, and warnings."""

    flavor: str | None
    num_gpus: int
    allowed: tuple[str, ...]
    need_mib: float | None
    warnings: tuple[str, ...]


def size_request(layout: ClusterLayout, cfg: SizingConfig, *, num_gpus: int, gpu_milli: int = MILLI,
                 peak_upper_mib: float | None = None, requested: tuple[str, ...] = ()) -> SizingAdvice:
    """Size one job (the single-job form of :func:`size_jobs`); ``requested`` names are read by rule
    *GPU request* (``predictor.capacity.requests``: any spelling; InputError for a name that is no GPU)."""
    req = None
    if requested:
        req, _ = requested_types(np.array(["|".join(requested)], dtype=object), layout)
    peak = np.nan if peak_upper_mib is None else float(peak_upper_mib)
    out = size_jobs(layout, cfg, num_gpus=np.array([num_gpus]), gpu_milli=np.array([gpu_milli]),
                    peak_upper_mib=np.array([peak]), requested_types=req)
    warnings = describe_sizing(layout, out, 0, num_gpus=num_gpus, gpu_milli=gpu_milli, peak_upper_mib=peak,
                               requested=None if req is None else req[0], request_text="|".join(requested) or None)
    flavor = int(out.flavor[0])
    return SizingAdvice(
        flavor=layout.gpu_types[flavor] if flavor >= 0 else None,
        num_gpus=int(num_gpus),
        allowed=tuple(layout.gpu_types[k] for k in np.flatnonzero(out.allowed[0])),
        need_mib=None if np.isnan(out.need_mib[0]) else float(out.need_mib[0]),
        warnings=warnings,
    )
