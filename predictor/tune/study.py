"""A tuning study end to end: split, search on the tuning window, choose, validate.

:func:`tune_policy` is what ``predictor tune`` runs (and ``benchmarks/bench_tune.py``): it cuts the
history (``predictor.tune.windows``), replays QSSF, FIFO and the base policy on the tuning window
beside the search (``predictor.tune.search``), picks the front point by rule *chosen point*
(``predictor.tune.choice``; QSSF itself when no point beats it clearly) and replays it on the validation window beside ``ours`` (the base
policy), ``qssf``, ``fifo``, ``kueue`` and ``sjf-oracle``. Every replay runs as a task on the Dask
client it is given (``predictor.tune.dask_replays``). Writing the outputs is ``predictor.tune.report``'s.

*Which QSSF judges* (:func:`judging_baseline`). On a cluster of one GPU type, ``qssf``. On several,
``qssf-sized``: QSSF with the base policy's memory sizing (``qssf`` keeps the requested type, loses the
jobs it leaves on too-small GPUs, and looks faster for it; docs/replay.md). There a point must beat
the QSSF that loses no more jobs than ours, not one that wins by failing jobs; both QSSFs are
replayed on both windows and reported, plain ``qssf`` as what a site running Helios' order has.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd
from distributed import Client

from predictor.capacity.inventory import Inventory
from predictor.policy.config import PolicyConfig
from predictor.sim.experiment import POLICIES
from predictor.sim.metrics import MetricsConfig
from predictor.sim.replay import SimConfig
from predictor.sim.rules import load_policy
from predictor.sim.workload import NO_TEAM
from predictor.tune.choice import MIN_MARGIN, Choice, choose
from predictor.tune.dask_replays import ReplayOutcome, WindowReplays
from predictor.tune.objectives import DEFAULT_OBJECTIVES, Objective, parse_objectives
from predictor.tune.search import SearchResult, TrialRecord, front_points, search
from predictor.tune.space import SEARCH_SPACE, Parameter, check_space, policy_with
from predictor.tune.windows import TuningSplit, Window, split_windows

__all__ = ["TuneSettings", "TuneResult", "tune_policy", "BASELINE_TRIAL", "TUNING_BASELINES", "VALIDATION_POLICIES",
           "judging_baseline", "with_judge", "judge_sizing"]

#: Replayed on the tuning window beside the trials (one GPU type): QSSF for the rule, FIFO and the
#: base for the plot; ``with_judge`` adds ``qssf-sized`` on several types.
TUNING_BASELINES: tuple[str, ...] = ("qssf", "fifo", "ours")
#: Replayed on the validation window, after ``tuned`` (one GPU type; ``with_judge`` for several).
VALIDATION_POLICIES: tuple[str, ...] = ("ours", "qssf", "fifo", "kueue", "sjf-oracle")


def judging_baseline(inventory: Inventory) -> str:
    """The QSSF the chosen point is judged against on ``inventory``: ``qssf-sized`` on a cluster of several
    GPU types, ``qssf`` on one (where sizing has nothing to choose and the two replays are the same)."""
    return "qssf-sized" if len(inventory.gpus_by_type()) > 1 else "qssf"


def with_judge(names: tuple[str, ...], judge: str) -> tuple[str, ...]:
    """``names`` (``TUNING_BASELINES``, ``VALIDATION_POLICIES``) with ``judge`` right after ``qssf``."""
    return tuple(dict.fromkeys(n for name in names for n in ((name, judge) if name == "qssf" else (name,))))


def judge_sizing(judge: str) -> str:
    """What the judging preset adds to QSSF, as a clause to append where it is described ("" for ``qssf``)."""
    return "" if judge == "qssf" else ", GPU flavor sized from predicted memory as the base policy sizes it"

Metrics = dict[str, float | None]
#: ``TuneResult.chosen.number`` when the chosen policy is QSSF itself (no trial of the search).
BASELINE_TRIAL = -1


@dataclass(frozen=True)
class TuneSettings:
    """How a study runs (the ``predictor tune`` options)."""

    trials: int = 50
    objectives: tuple[Objective, ...] = field(default_factory=lambda: parse_objectives(DEFAULT_OBJECTIVES))
    seed: int = 0
    population: int = 16
    sampler: str = "nsga2"
    train_fraction: float = 0.3
    validate_fraction: float = 0.3
    sim: SimConfig = field(default_factory=SimConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    space: tuple[Parameter, ...] = SEARCH_SPACE
    fit_options: dict = field(default_factory=dict)
    #: consecutive parts of the tuning window the chosen point must also be no worse than QSSF on
    #: (``predictor.tune.choice``; 0: the whole window only)
    parts: int = 2
    #: the margin over QSSF a point needs to be chosen rather than QSSF itself
    min_margin: float = MIN_MARGIN


@dataclass(frozen=True)
class TuneResult:
    """What a study found and how the chosen policy did on the validation window."""

    settings: TuneSettings
    split: TuningSplit
    search: SearchResult
    choice: Choice
    chosen: TrialRecord
    policy: PolicyConfig  # the chosen point as a policy named "tuned"
    base: PolicyConfig
    tuning_baselines: dict[str, Metrics]
    validation: dict[str, Metrics]  # "tuned" first, then VALIDATION_POLICIES
    seconds: dict[str, float]  # wall seconds of the split, the search and the validation
    workers: int = 0
    teams: tuple[str, ...] = ()  # the teams of the replayed windows
    judge: str = "qssf"  # the QSSF preset the rule judged against (``judging_baseline``)

    @property
    def chosen_label(self) -> str:
        """``trial N`` (``trial 0``: the base policy), or the judging QSSF's name when the chosen policy is it."""
        if self.choice.base:
            return "the base policy (trial 0)"
        return self.judge if self.choice.baseline else f"trial {self.chosen.number}"


def _outcome(name: str, out: ReplayOutcome | BaseException) -> ReplayOutcome:
    if isinstance(out, BaseException):
        raise RuntimeError(f"the {name} replay failed: {type(out).__name__}: {out}") from out
    return out


def tune_policy(jobs: pd.DataFrame, inventory: Inventory, client: Client, settings: TuneSettings | None = None, *,
                policy_file: str | None = None, on_phase: Callable[[str], None] | None = None,
                on_generation: Callable[[Sequence[TrialRecord]], None] | None = None,
                windows: tuple[TuningSplit, Window, Window] | None = None) -> TuneResult:
    """Run a study on ``client``; see the module docstring.

    Parameters
    ----------
    jobs : DataFrame
        The canonical job history (validated).
    inventory : Inventory
    client : distributed.Client
    settings : TuneSettings, optional
    policy_file : str, optional
        The base policy (tiers, teams, switches); the presets of the baselines are laid over it too.
    on_phase, on_generation : callable, optional
        Progress: a line per phase; each generation's trial records once told.
    windows : tuple, optional
        ``split_windows``'s result for ``jobs`` and ``inventory`` with the settings' fractions, when
        it was computed already (several studies on one split); by default it is computed here.
    """
    cfg = settings or TuneSettings()
    say = on_phase or (lambda _m: None)
    base = load_policy("ours", base_file=policy_file)
    check_space(base, cfg.space)
    judge = judging_baseline(inventory)
    tuning_names, validation_names = with_judge(TUNING_BASELINES, judge), with_judge(VALIDATION_POLICIES, judge)
    presets = {n: load_policy(POLICIES[n].preset, base_file=policy_file)
               for n in dict.fromkeys(tuning_names + validation_names)}
    started = time.perf_counter()
    split, tune_window, validate_window = windows or split_windows(
        jobs, inventory, train_fraction=cfg.train_fraction, validate_fraction=cfg.validate_fraction,
        fit_options=cfg.fit_options, on_phase=say)
    for line in split.describe():
        say(line)
    seconds = {"split_s": time.perf_counter() - started}
    workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))

    started = time.perf_counter()
    with WindowReplays(client, tune_window, inventory, cfg.sim, cfg.metrics, parts=cfg.parts) as tuning:
        baselines = {n: tuning.submit(f"baseline-{n}", n, presets[n], POLICIES[n].predictions)
                     for n in tuning_names}

        def evaluate(batch: Sequence[tuple[int, PolicyConfig]]) -> list[tuple[Metrics, float] | BaseException]:
            outs = tuning.run([(f"trial-{n}", f"trial-{n}", policy, "trained") for n, policy in batch])
            return [o if isinstance(o, BaseException) else (o.metrics, o.cpu_s) for o in outs]

        say(f"searching: {cfg.trials} trials in generations of {cfg.population} ({cfg.sampler}, seed {cfg.seed}) "
            f"on {workers} Dask worker(s), objectives {', '.join(o.metric for o in cfg.objectives)}; judged against "
            f"{judge}" + (" (several GPU types: QSSF with the base policy's sizing)" if judge != "qssf" else ""))
        result = search(evaluate, base, cfg.objectives, trials=cfg.trials, seed=cfg.seed, population=cfg.population,
                        sampler=cfg.sampler, space=cfg.space, on_generation=on_generation, sized=judge != "qssf")
        tuning_baselines = {}
        for n, fut in baselines.items():
            try:
                tuning_baselines[n] = fut.result().metrics
            except Exception as exc:  # noqa: BLE001 - re-raised with the policy named
                _outcome(f"{n} (tuning window)", exc)
    seconds["search_s"] = time.perf_counter() - started

    first = result.trials[0] if result.trials and result.trials[0].number == 0 else None  # the base policy
    choice = choose(front_points(result), tuning_baselines[judge], min_margin=cfg.min_margin,
                    base=first.metrics if first is not None and first.ok else None, name=judge)
    if choice.base:  # the base policy (trial 0): QSSF, the fallback, lost many more jobs out of memory
        chosen = first
        policy = policy_with(base, first.params, name="tuned")
    elif choice.baseline:  # QSSF itself: its tuning-window replay is the chosen point's
        chosen = TrialRecord(BASELINE_TRIAL, {}, dict(tuning_baselines[judge]))
        policy = policy_with(presets[judge], {}, name="tuned")
    else:
        chosen = result.front_trials()[choice.index]
        policy = policy_with(base, chosen.params, name="tuned")
    say(f"chosen: {f'{judge} itself' if choice.baseline else f'trial {chosen.number}'} by the rule: {choice.rule}")

    started = time.perf_counter()
    say(f"validating on {split.validate_jobs:,} jobs: tuned, {', '.join(validation_names)}")
    with WindowReplays(client, validate_window, inventory, cfg.sim, cfg.metrics) as validating:
        items = [("tuned", "tuned", policy, "trained")] + [
            (n, n, presets[n], POLICIES[n].predictions) for n in validation_names]
        outs = validating.run(items)
    validation = {name: _outcome(f"{name} (validation window)", o).metrics
                  for (name, _, _, _), o in zip(items, outs, strict=True)}
    seconds["validate_s"] = time.perf_counter() - started
    teams = tuple(sorted((set(tune_window.jobs.teams) | set(validate_window.jobs.teams)) - {NO_TEAM}))
    return TuneResult(cfg, split, result, choice, chosen, policy, base, tuning_baselines, validation, seconds,
                      workers, teams, judge)
