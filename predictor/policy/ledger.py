"""The fair-share ledger: each team's GPU usage, decaying exponentially with a half-life.

Usage at time ``t`` of a team is ``sum over its jobs of gpus x integral over the run of
2 ** (-(t - u) / half_life) du`` (GPU-seconds, recent use counting fully, use one half-life ago
half). It is fed job events (start, finish, preempt, fail) and answers ``usage_at(now)``.

The result depends only on the set of events recorded and on ``now``: events may arrive in any
order (the contribution of a finished run is computed in closed form against a fixed reference
time), so the service can rebuild it from its event log and the replay can feed it as it goes. It
is serialisable (``to_dict``/``from_dict``) for the service to persist.

A finished run ``[s, e]`` on ``g`` GPUs contributes, at ``t >= e``::

    g * H / ln 2 * (2 ** (-(t - e) / H) - 2 ** (-(t - s) / H))

and a run still open since ``s`` contributes ``g * H / ln 2 * (1 - 2 ** (-(t - s) / H))``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from features.errors import InputError

__all__ = ["JobEvent", "FairShareLedger"]

EventKind = Literal["start", "finish", "preempt", "fail"]
_CLOSING = frozenset({"finish", "preempt", "fail"})
_LN2 = math.log(2.0)
_REBASE_AFTER = 400.0  # half-lives between the reference time and new events before re-basing


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A job event the ledger counts: ``start`` (with team and GPUs) or a closing event."""

    kind: EventKind
    job_id: str
    ts: float
    team: str | None = None
    gpus: float = 0.0  # GPUs held, shares as fractions (num_gpus x gpu_milli / 1000)


class FairShareLedger:
    """Decayed GPU-second usage per team (see the module docstring).

    Parameters
    ----------
    half_life_s : float
        Usage half-life in seconds (``factors.fairshare.half_life_s``).
    ref_ts : float, optional
        Reference time of the stored values (the first event's time when omitted).
    """

    def __init__(self, half_life_s: float, ref_ts: float | None = None) -> None:
        if not half_life_s > 0:
            raise InputError(f"fair-share half-life must be positive, got {half_life_s}")
        self.half_life_s = float(half_life_s)
        self.ref_ts = ref_ts
        self._closed: dict[str, float] = {}  # team -> usage value at ref_ts
        self._open: dict[str, tuple[str, float, float]] = {}  # job -> (team, gpus, since)

    # ------------------------------------------------------------------ feeding
    def _rebase_for(self, ts: float) -> None:
        """Set the reference time on first use; move it forward when ``ts`` is far after it."""
        if self.ref_ts is None:
            self.ref_ts = float(ts)
        elif (ts - self.ref_ts) / self.half_life_s > _REBASE_AFTER:
            shift = math.exp2(-((ts - self.ref_ts) / self.half_life_s))
            self._closed = {k: v * shift for k, v in self._closed.items()}
            self.ref_ts = float(ts)

    def charge(self, team: str, gpus: float, start_ts: float, end_ts: float) -> None:
        """Add a finished run of ``gpus`` GPUs from ``start_ts`` to ``end_ts``."""
        if not end_ts >= start_ts:
            raise InputError(f"usage of team {team}: run ends ({end_ts}) before it starts ({start_ts})")
        if gpus < 0:
            raise InputError(f"usage of team {team}: negative GPU count {gpus}")
        self._rebase_for(end_ts)
        assert self.ref_ts is not None
        a = math.exp2((start_ts - self.ref_ts) / self.half_life_s)
        b = math.exp2((end_ts - self.ref_ts) / self.half_life_s)
        self._closed[team] = self._closed.get(team, 0.0) + gpus * self.half_life_s / _LN2 * (b - a)

    def record(self, event: JobEvent) -> None:
        """Apply one event. InputError for a start of a job already running, a closing event of a
        job not running, a start without team or GPUs, or a close before the start."""
        if event.kind == "start":
            if event.job_id in self._open:
                raise InputError(f"fair-share ledger: job {event.job_id} started twice without finishing")
            if event.team is None or not event.gpus > 0:
                raise InputError(f"fair-share ledger: start of job {event.job_id} needs a team and GPUs > 0")
            self._open[event.job_id] = (event.team, float(event.gpus), float(event.ts))
            self._rebase_for(event.ts)
        elif event.kind in _CLOSING:
            held = self._open.pop(event.job_id, None)
            if held is None:
                raise InputError(f"fair-share ledger: {event.kind} of job {event.job_id}, which is not running")
            team, gpus, since = held
            if event.ts < since:
                self._open[event.job_id] = held
                raise InputError(f"fair-share ledger: job {event.job_id} {event.kind} at {event.ts} before its "
                                 f"start at {since}")
            self.charge(team, gpus, since, float(event.ts))
        else:
            raise InputError(f"fair-share ledger: unknown event kind {event.kind!r}")

    @classmethod
    def from_events(cls, events: Iterable[JobEvent], half_life_s: float) -> FairShareLedger:
        """A ledger holding ``events`` (starts are applied before the closes of the same job)."""
        ledger = cls(half_life_s)
        events = sorted(events, key=lambda e: (e.ts, e.kind not in ("start",)))
        for e in events:
            ledger.record(e)
        return ledger

    @classmethod
    def from_jobs(cls, jobs: pd.DataFrame, half_life_s: float, until_ts: float | None = None) -> FairShareLedger:
        """Charge every run of a canonical job table that started (up to ``until_ts`` if given).

        Rows need ``team``, ``num_gpus``, ``start_ts`` and ``end_ts`` (a run without an end, or ending
        after ``until_ts``, is charged up to ``until_ts`` when given, else skipped as still open);
        ``gpu_milli`` scales GPU shares. Rows without a team or a start are not usage.
        """
        ledger = cls(half_life_s)
        df = jobs[jobs["team"].notna() & jobs["start_ts"].notna() & jobs["num_gpus"].notna()]
        milli = df["gpu_milli"].fillna(1000.0) if "gpu_milli" in df.columns else 1000.0
        gpus = (df["num_gpus"].astype(float) * milli / 1000.0).to_numpy()
        start = df["start_ts"].astype(float).to_numpy()
        end = df["end_ts"].astype(float).to_numpy()
        if until_ts is not None:
            end = np.where(np.isnan(end), until_ts, np.minimum(end, until_ts))
        for team, g, s, e in zip(df["team"].astype(str), gpus, start, end, strict=True):
            if np.isfinite(e) and e >= s:
                ledger.charge(team, float(g), float(s), float(e))
        return ledger

    # ------------------------------------------------------------------ reading
    def usage_at(self, now: float) -> dict[str, float]:
        """Decayed GPU-seconds per team at ``now`` (closed runs plus open runs up to ``now``)."""
        out: dict[str, float] = {}
        if self.ref_ts is not None:
            decay = math.exp2(-(now - self.ref_ts) / self.half_life_s)
            out = {k: v * decay for k, v in self._closed.items()}
        scale = self.half_life_s / _LN2
        for team, gpus, since in self._open.values():
            if now > since:
                out[team] = out.get(team, 0.0) + gpus * scale * (1.0 - math.exp2(-(now - since) / self.half_life_s))
            else:
                out.setdefault(team, 0.0)
        return out

    def usage_array(self, now: float, teams: Iterable[str]) -> np.ndarray:
        """``usage_at(now)`` aligned with ``teams`` (0 for a team with no usage)."""
        u = self.usage_at(now)
        return np.array([u.get(t, 0.0) for t in teams], dtype=np.float64)

    @property
    def running_jobs(self) -> tuple[str, ...]:
        return tuple(self._open)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        """A JSON-ready form (floats, strings, lists)."""
        return {
            "half_life_s": self.half_life_s,
            "ref_ts": self.ref_ts,
            "closed": dict(self._closed),
            "open": {j: [t, g, s] for j, (t, g, s) in self._open.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> FairShareLedger:
        """Inverse of :meth:`to_dict`; InputError naming what is malformed."""
        try:
            ledger = cls(float(data["half_life_s"]), None if data.get("ref_ts") is None else float(data["ref_ts"]))
            ledger._closed = {str(k): float(v) for k, v in dict(data.get("closed", {})).items()}
            ledger._open = {str(j): (str(v[0]), float(v[1]), float(v[2])) for j, v in dict(data.get("open", {})).items()}
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"fair-share ledger state is malformed: {exc!r}") from None
        return ledger
