"""How long runs take and how they end: work, true durations, time limits and competing end events.

Work and true duration
    Each family has a log-median duration (seconds) on its own config,
    ``mu_f = base[tier] + b_P log10(P / 1e8) + b_n log2(n_f) + N(0, sd_between)``, clipped to
    [30 s, 30 days]; with its config's best-placement throughput ``X_f`` (samples/s, from
    :mod:`features.synth.topology_truth`) that is a median amount of work ``W_f = e^mu_f X_f``. A run
    does ``W_f e^(sd_f Z)`` samples, or a ``trial_fraction`` of that when it is a smoke test
    (probability ``trial_share_f``): a per-family mixture of two lognormals. Its true duration is
    work over its own config's throughput ``X_j`` (so a run on faster GPUs or a bigger gang is
    shorter). Same family => similar durations; families differ by orders of magnitude.

Run as placed
    ``run = true_duration * slowdown(placement) * e^(N(0, 0.06))`` (run-to-run jitter), and the
    measured throughput is ``X_j / (slowdown * jitter)``, so ``throughput * run = work``.

End events (the earliest wins; all hazards are per family or per user, so some are flakier)
    * start-up failure (bad config, missing data): probability ``early_fail_f``, at a lognormal time
      around 90 s, at most half the run -> FAILED, no peak memory recorded (no training step ran);
    * crash while running: exponential with rate ``fail_per_hour_f`` -> FAILED;
    * hardware failure: rate ``node_fail_per_gpu_hour * num_gpus`` -> NODE_FAIL;
    * preemption (``best_effort`` only): rate ``preempt_per_hour`` -> PREEMPTED;
    * cancellation: probability ``cancel_u`` of the user, uniformly during the run -> CANCELLED;
    * time limit -> TIMEOUT at exactly the limit;
    * otherwise COMPLETED after ``run``.
    A run whose true peak memory exceeds its GPU ends OUT_OF_MEMORY after its start-up (lognormal
    around 100 s) before any of these.

Time limits
    A user either always asks for the queue default (:data:`DEFAULT_LIMIT_S`) or rounds her
    expectation, family median times a personal over-estimate factor, up to the next value on
    :data:`LIMIT_MENU_S`; 8 % of runs move one step on the menu. Limits are thus generous round
    numbers that predict run time poorly (Tsafrir et al., 2007, on user runtime estimates).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.schema import STATES
from features.synth.profiles import TIERS, Profile

__all__ = ["LIMIT_MENU_S", "DEFAULT_LIMIT_S", "FamilyTiming", "Outcomes", "draw_family_timing", "draw_outcomes"]

LIMIT_MENU_S = np.array([1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 259200, 432000, 604800,
                         1209600], dtype=float)
#: Queue default limit per tier, in :data:`features.synth.profiles.TIERS` order.
DEFAULT_LIMIT_S = np.array([259200, 14400, 259200, 604800, 604800], dtype=float)
_CHECKPOINT_MENU_S = np.array([900, 1800, 3600, 7200], dtype=float)
#: Outcome codes in the order :func:`draw_outcomes` resolves competing events.
END_STATES = ("COMPLETED", "FAILED", "FAILED", "NODE_FAIL", "PREEMPTED", "CANCELLED", "TIMEOUT")


@dataclass(frozen=True)
class FamilyTiming:
    """Per-family duration and failure parameters (index = family)."""

    log_median_s: np.ndarray
    within_sd: np.ndarray
    trial_share: np.ndarray
    early_fail: np.ndarray
    fail_per_hour: np.ndarray
    limit_s: np.ndarray
    checkpoint_s: np.ndarray


def _beta_with_mean(rng: np.random.Generator, mean: float, size: int, concentration: float = 4.0) -> np.ndarray:
    mean = float(np.clip(mean, 1e-6, 1 - 1e-6))
    return rng.beta(mean * concentration, (1 - mean) * concentration, size)


def draw_family_timing(rng: np.random.Generator, tier: np.ndarray, params: np.ndarray, num_gpus: np.ndarray,
                       user_default_limit: np.ndarray, user_overestimate: np.ndarray,
                       profile: Profile) -> FamilyTiming:
    """Draw duration, failure, time-limit and checkpoint parameters for each family."""
    nf = len(tier)
    base = np.array([profile.log_duration_base[t] for t in TIERS])[tier]
    mu = (base + profile.log_duration_per_decade * np.log10(params / 1e8)
          + profile.log_duration_per_doubling * np.log2(np.maximum(num_gpus, 1))
          + rng.normal(0.0, profile.log_duration_between_sd, nf))
    mu = np.clip(mu, np.log(30.0), np.log(30 * 86400.0))
    own = LIMIT_MENU_S[np.minimum(np.searchsorted(LIMIT_MENU_S, np.exp(mu) * user_overestimate),
                                  len(LIMIT_MENU_S) - 1)]
    long_running = (np.exp(mu) > 7200) & (tier != TIERS.index("debug"))
    return FamilyTiming(
        log_median_s=mu,
        within_sd=rng.uniform(*profile.within_family_sd, nf),
        trial_share=_beta_with_mean(rng, profile.trial_share, nf),
        early_fail=_beta_with_mean(rng, profile.early_fail_share, nf, 6.0),
        fail_per_hour=rng.lognormal(np.log(profile.fail_per_hour), 1.0, nf),
        limit_s=np.where(user_default_limit, DEFAULT_LIMIT_S[tier], own),
        checkpoint_s=np.where(long_running & (rng.random(nf) < 0.8),
                              _CHECKPOINT_MENU_S[rng.integers(0, len(_CHECKPOINT_MENU_S), nf)], np.nan),
    )


def draw_work(rng: np.random.Generator, timing: FamilyTiming, fam_of_job: np.ndarray, family_throughput: np.ndarray,
              profile: Profile) -> np.ndarray:
    """Samples of work each run does (see module docstring)."""
    j = fam_of_job
    n = len(j)
    work = np.exp(timing.log_median_s[j] + timing.within_sd[j] * rng.standard_normal(n)) * family_throughput[j]
    trial = rng.random(n) < timing.trial_share[j]
    frac = rng.uniform(*profile.trial_fraction, n)
    return np.where(trial, work * frac, work)


@dataclass(frozen=True)
class Outcomes:
    """Per-run outcome before censoring: state (code into :data:`features.schema.STATES`), run time
    from start to end, time limit, run-time jitter, and whether a training step ran."""

    state: np.ndarray
    run_s: np.ndarray
    limit_s: np.ndarray
    jitter: np.ndarray
    started_training: np.ndarray


def draw_outcomes(rng: np.random.Generator, *, timing: FamilyTiming, fam_of_job: np.ndarray, tier: np.ndarray,
                  true_duration_s: np.ndarray, slowdown: np.ndarray, num_gpus: np.ndarray, oom: np.ndarray,
                  cancel_share: np.ndarray, profile: Profile) -> Outcomes:
    """Resolve each run's end (see module docstring). ``cancel_share`` is per job (its user's)."""
    j = fam_of_job
    n = len(j)
    jitter = np.exp(rng.normal(0.0, 0.06, n))
    full_run = true_duration_s * slowdown * jitter
    step = rng.random(n) < 0.08
    limit_idx = np.searchsorted(LIMIT_MENU_S, timing.limit_s[j])
    limit_idx = np.clip(limit_idx + np.where(step, rng.choice([-1, 1], n), 0), 0, len(LIMIT_MENU_S) - 1)
    limit = LIMIT_MENU_S[limit_idx]
    inf = np.full(n, np.inf)
    early = np.where(rng.random(n) < timing.early_fail[j],
                     np.minimum(rng.lognormal(np.log(90.0), 1.0, n), 0.5 * full_run), inf)
    crash = rng.exponential(3600.0 / timing.fail_per_hour[j])
    node = rng.exponential(3600.0 / (profile.node_fail_per_gpu_hour * np.maximum(num_gpus, 1)))
    preempt = np.where(tier == TIERS.index("best_effort"), rng.exponential(3600.0 / profile.preempt_per_hour, n), inf)
    cancel = np.where(rng.random(n) < cancel_share, full_run * rng.uniform(0.01, 0.99, n), inf)
    events = np.stack([full_run, early, crash, node, preempt, cancel, limit])
    which = np.argmin(events, axis=0)
    run = events[which, np.arange(n)]
    state = np.array([STATES.index(s) for s in END_STATES])[which]
    startup = rng.lognormal(np.log(100.0), 0.8, n)
    state = np.where(oom, STATES.index("OUT_OF_MEMORY"), state)
    run = np.where(oom, np.minimum(startup, limit), run)
    started_training = ~oom & (which != 1)
    return Outcomes(state=state, run_s=run, limit_s=limit, jitter=jitter, started_training=started_training)
