"""Fair-share explained: per team, decayed usage over time, share, factor, and when the factor recovers.

Usage is the fair-share ledger's (``predictor.policy.ledger``): GPU-seconds decaying with half-life
``H``. A run ``[s, e]`` on ``g`` GPUs counts, at ``t``, ``g H / ln 2 (2^(-(t - min(e, t)) / H) -
2^(-(t - s) / H))`` (zero before ``s``), so the usage of any past instant is computed from the
recorded runs (:func:`decayed_usage`). The factor is the classic one of
``predictor.policy.factors.fairshare``: ``F = 2^(-u / s)`` with ``u`` the team's fraction of all
teams' usage and ``s`` its fraction of all shares; ``F = 0.5`` is a team using exactly its share.

Rule *recovery at the current rate*: with every team holding the GPUs it holds now, team usage
follows ``U(t) = U_inf + (U_0 - U_inf) 2^(-t / H)`` (``U_inf = rate x H / ln 2``); the factor is
projected on that path and the recovery time is the first instant it reaches 0.5 (the team is no
longer over its share), None when it never does at these rates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from predictor.capacity.layout import MILLI
from predictor.engine.engine import Engine
from predictor.store.database import Database
from predictor.store.jobs import usage_charges

__all__ = ["decayed_usage", "recovery_at_current_rates", "team_fairshare", "teams_fairshare", "NEUTRAL_FACTOR"]

_LN2 = math.log(2.0)
#: The factor of a team using exactly its share (``2^-1``).
NEUTRAL_FACTOR = 0.5


def decayed_usage(team: np.ndarray, gpus: np.ndarray, start: np.ndarray, end: np.ndarray, times: np.ndarray,
                  half_life_s: float, n_teams: int) -> np.ndarray:
    """Decayed GPU-seconds per team (columns) at each of ``times`` (rows), from runs ``[start, end]``
    (``end`` inf for a run still open)."""
    t = np.asarray(times, dtype=np.float64)[:, None]
    s, e = start[None, :], np.minimum(end[None, :], t)
    scale = half_life_s / _LN2
    with np.errstate(over="ignore", invalid="ignore"):
        value = gpus[None, :] * scale * (np.exp2(-(t - e) / half_life_s) - np.exp2(-(t - s) / half_life_s))
    value = np.where(t > s, np.nan_to_num(value, nan=0.0), 0.0)
    out = np.zeros((len(t), n_teams))
    for k in range(n_teams):
        out[:, k] = value[:, team == k].sum(axis=1)
    return out


def _factor(usage: np.ndarray, share_fraction: np.ndarray) -> np.ndarray:
    total = usage.sum(axis=-1, keepdims=True)
    frac = np.divide(usage, total, out=np.zeros_like(usage), where=total > 0)
    return np.exp2(-frac / share_fraction)


def recovery_at_current_rates(usage_now: np.ndarray, rate_gpus: np.ndarray, share_fraction: np.ndarray,
                              half_life_s: float) -> tuple[list[float | None], np.ndarray]:
    """Per team: seconds until its factor reaches 0.5 with every team holding ``rate_gpus`` from now
    (0 when it is not over its share, None when it never gets there within 20 half-lives), and its
    factor one half-life from now (rule *recovery at the current rate*, module docstring)."""
    n = len(usage_now)
    ahead = np.concatenate([[0.0], half_life_s * np.geomspace(1e-3, 20.0, 2000)])
    u_inf = np.asarray(rate_gpus, dtype=np.float64) * half_life_s / _LN2
    proj = u_inf[None, :] + (usage_now - u_inf)[None, :] * np.exp2(-ahead[:, None] / half_life_s)
    fproj = _factor(proj, share_fraction) if n else np.zeros((len(ahead), 0))
    out: list[float | None] = []
    for k in range(n):
        if fproj[0, k] >= NEUTRAL_FACTOR - 1e-12:
            out.append(0.0)
            continue
        ok = np.flatnonzero(fproj[:, k] >= NEUTRAL_FACTOR - 1e-12)
        out.append(float(ahead[ok[0]]) if len(ok) else None)
    return out, fproj[np.searchsorted(ahead, half_life_s)]


def _runs(db: Database, engine: Engine, now: float, names: list[str]) -> tuple[np.ndarray, ...]:
    """Every recorded run (charged, and the running jobs' open runs) as arrays: team code, GPUs, start,
    end; team codes index ``names`` (extended with teams met)."""
    code = {n: k for k, n in enumerate(names)}
    team, gpus, start, end = [], [], [], []
    with db.session() as s:
        for c in usage_charges(s):
            team.append(code.setdefault(c.team, len(code)))
            gpus.append(c.gpus)
            start.append(c.start_ts)
            end.append(c.end_ts)
    pic = engine.picture
    run = pic.running
    for i in range(len(run)):
        k = int(run.team[i])
        if k < 0:
            continue
        name = pic.vocab.teams.names[k]
        team.append(code.setdefault(name, len(code)))
        gpus.append(float(run.num_gpus[i]) * float(run.gpu_milli[i]) / MILLI)
        start.append(min(float(run.start_ts[i]), now))
        end.append(math.inf)
    names[:] = list(code)
    return (np.array(team, dtype=np.int64), np.array(gpus, dtype=np.float64), np.array(start, dtype=np.float64),
            np.array(end, dtype=np.float64))


def teams_fairshare(db: Database, engine: Engine, now: float, *, history_points: int = 25,
                    history_span_s: float | None = None) -> dict[str, Any]:
    """Every team's fair-share now, its decayed usage over the past (``history_points`` instants over
    ``history_span_s``, two half-lives by default) and the projection of its factor (see the module
    docstring)."""
    policy = engine.policy
    half_life = float(policy.factors.fairshare.half_life_s)
    # the teams the rules layer weighs: the policy's and those of the tracked jobs
    names = list(dict.fromkeys([*policy.teams, *engine.picture.vocab.teams.names]))
    team, gpus, start, end = _runs(db, engine, now, names)
    n = len(names)
    shares = np.array([policy.share_of(t) for t in names], dtype=np.float64)
    share_fraction = shares / shares.sum() if n and shares.sum() > 0 else np.ones(n)
    span = 2 * half_life if history_span_s is None else float(history_span_s)
    past = now - span * np.linspace(1.0, 0.0, max(history_points, 2))
    usage_hist = decayed_usage(team, gpus, start, end, past, half_life, n)
    usage_now = usage_hist[-1]
    factor_now = _factor(usage_now[None, :], share_fraction)[0] if n else np.zeros(0)
    rate = np.bincount(team[~np.isfinite(end)], weights=gpus[~np.isfinite(end)], minlength=n).astype(np.float64)
    recovery, in_one = recovery_at_current_rates(usage_now, rate, share_fraction, half_life)
    hist_factor = _factor(usage_hist, share_fraction)
    teams = []
    for k, name in enumerate(names):
        over = factor_now[k] < NEUTRAL_FACTOR - 1e-12
        teams.append({
            "team": name, "share": float(shares[k]), "share_fraction": float(share_fraction[k]),
            "usage_gpu_hours": float(usage_now[k]) / 3600.0,
            "usage_fraction": float(usage_now[k] / usage_now.sum()) if usage_now.sum() > 0 else 0.0,
            "factor": float(factor_now[k]), "running_gpus": float(rate[k]),
            "over_share": bool(over), "recovers_in_s": recovery[k],
            "factor_in_one_half_life": float(in_one[k]),
            "usage_history": [{"ts": float(t), "usage_gpu_hours": float(u) / 3600.0, "factor": float(f)}
                              for t, u, f in zip(past, usage_hist[:, k], hist_factor[:, k], strict=True)],
        })
    teams.sort(key=lambda t: t["team"])
    return {"teams": teams, "half_life_s": half_life, "as_of": now,
            "rule": "fairshare (predictor.policy.factors.fairshare): F = 2^(-usage fraction / share fraction); "
                    "recovery: the first instant F reaches 0.5 with every team holding what it holds now"}


def team_fairshare(db: Database, engine: Engine, team: str, now: float, **kw: Any) -> dict[str, Any]:
    """:func:`teams_fairshare` for one team; KeyError if the policy and the records know no such team."""
    doc = teams_fairshare(db, engine, now, **kw)
    for t in doc["teams"]:
        if t["team"] == team:
            return {**t, "half_life_s": doc["half_life_s"], "as_of": now, "rule": doc["rule"]}
    raise KeyError(f"no team {team!r}: not in the policy and no usage recorded")
