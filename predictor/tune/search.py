"""The multi-objective search: Optuna asks for policies, a replay scores each, the Pareto front is kept.

Reproducible by construction
----------------------------
Trials run in *generations* of ``population`` trials. A generation's trials are all asked before
any is told (they run in parallel), and told in trial-number order once the whole generation is
back. So what the sampler knows when it samples a trial depends only on the seed and on earlier
generations' results, never on which worker finished first, how many workers there are, or whether
a worker died and a trial ran twice: for a fixed seed the trials, and so the front, are the same.
NSGA-II's generation is exactly such a batch; the multi-objective TPE samples each batch from the
trials told before it.

The first trial is the base policy itself (its searched settings brought into their ranges), so the
front never misses a point the default already reaches; the second is the point of the space nearest
to QSSF (``predictor.tune.space.qssf_like``), the baseline the chosen point is judged against.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from features.errors import InputError
from predictor.policy.config import PolicyConfig
from predictor.tune.objectives import Objective, objective_values
from predictor.tune.space import SEARCH_SPACE, Parameter, distributions, policy_with, qssf_like, values_in

__all__ = ["SAMPLERS", "TrialRecord", "SearchResult", "make_sampler", "search"]

SAMPLERS: tuple[str, ...] = ("nsga2", "tpe")

Metrics = dict[str, float | None]
#: Scores a batch of policies (a whole generation, in parallel): per policy, its tuning-window metrics
#: and the CPU seconds its replay took, or the exception it raised.
Evaluate = Callable[[Sequence[tuple[int, PolicyConfig]]], Sequence[tuple[Metrics, float] | BaseException]]


@dataclass(frozen=True)
class TrialRecord:
    """One trial: its parameters, its tuning-window metrics (None when it failed) and why it failed."""

    number: int
    params: dict[str, float | int]
    metrics: Metrics | None
    error: str | None = None
    cpu_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.metrics is not None


@dataclass(frozen=True)
class SearchResult:
    """Every trial in number order and the numbers of the Pareto-front trials (ascending)."""

    trials: tuple[TrialRecord, ...]
    front: tuple[int, ...]

    def front_trials(self) -> list[TrialRecord]:
        by_number = {t.number: t for t in self.trials}
        return [by_number[n] for n in self.front]


def make_sampler(kind: str, seed: int, population: int) -> optuna.samplers.BaseSampler:
    """NSGA-II (``nsga2``) or the multi-objective TPE (``tpe``), seeded."""
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=population, multivariate=True,
                                          constant_liar=False)
    raise InputError(f"--sampler: unknown sampler {kind!r}; choose {' or '.join(SAMPLERS)}")


def search(evaluate: Evaluate, base: PolicyConfig, objectives: Sequence[Objective], *, trials: int, seed: int = 0,
           population: int = 16, sampler: str = "nsga2", space: Sequence[Parameter] = SEARCH_SPACE,
           on_generation: Callable[[Sequence[TrialRecord]], None] | None = None, sized: bool = False) -> SearchResult:
    """Run ``trials`` trials in generations of ``population`` and return them with the front.

    Parameters
    ----------
    evaluate : callable
        Scores a generation (see :data:`Evaluate`).
    base : PolicyConfig
        The policy whose searched settings the trials change.
    objectives : sequence of Objective
    trials, seed, population, sampler
        Study size, seed, generation size, ``nsga2`` or ``tpe``.
    on_generation : callable, optional
        Called with each generation's records once it is told (progress, MLflow).
    sized : bool
        Trial 1 is the point next to ``qssf-sized`` (the base policy's sizing kept) instead of ``qssf``:
        the baseline a cluster of several GPU types is judged against.
    """
    if trials < 1:
        raise InputError(f"--trials must be at least 1, got {trials}")
    if population < 2:
        raise InputError(f"--population must be at least 2, got {population}")
    optuna.logging.set_verbosity(logging.WARNING)
    study = optuna.create_study(directions=[o.direction for o in objectives],
                                sampler=make_sampler(sampler, seed, population), study_name="predictor-tune")
    dists = distributions(space)
    study.enqueue_trial(values_in(base, space))
    if trials > 1:
        study.enqueue_trial(qssf_like(base, space, sized=sized))
    records: list[TrialRecord] = []
    while len(records) < trials:
        asked = [study.ask(dists) for _ in range(min(population, trials - len(records)))]
        policies: dict[int, PolicyConfig] = {}
        invalid: dict[int, str] = {}
        for t in asked:
            try:
                policies[t.number] = policy_with(base, t.params, name=f"trial-{t.number}")
            except InputError as exc:  # a combination the policy model refuses: that trial fails
                invalid[t.number] = str(exc)
        scored = dict(zip(policies, evaluate(list(policies.items())), strict=True))
        generation = []
        for t in asked:
            outcome = scored.get(t.number)
            if isinstance(outcome, BaseException) or outcome is None:
                error = invalid.get(t.number) or f"{type(outcome).__name__}: {outcome}"
                study.tell(t, state=TrialState.FAIL)
                generation.append(TrialRecord(t.number, dict(t.params), None, error))
                continue
            metrics, cpu_s = outcome
            study.tell(t, objective_values(objectives, metrics))
            generation.append(TrialRecord(t.number, dict(t.params), dict(metrics), None, cpu_s))
        records.extend(generation)
        if on_generation is not None:
            on_generation(generation)
        if not any(r.ok for r in records):  # a whole generation failed: the next would too
            raise RuntimeError(f"every trial of the first generation failed; trial 0: {records[0].error}")
    front = tuple(sorted(t.number for t in study.best_trials))
    return SearchResult(tuple(records), front)


def front_points(result: SearchResult) -> list[Mapping[str, float | None]]:
    """The front's tuning-window metrics, in front order."""
    return [t.metrics or {} for t in result.front_trials()]
