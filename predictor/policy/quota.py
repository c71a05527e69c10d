"""Team quotas with cohort borrowing, in the manner of Kueue's ClusterQueues in one cohort.

Rule *quota admission* (``quotas.enabled``): each team has a nominal GPU quota (``teams.*.nominal_gpus``;
else ``quotas.default_nominal_gpus``; else, with ``quotas.nominal_from_shares``, the cluster's GPUs
split by the teams' shares; else no quota). A job is admitted when its team's usage plus the job
stays within the nominal quota, or - with ``quotas.borrowing`` - when the cohort as a whole still has
unused nominal quota for it and the team borrows no more than its ``borrowing_limit_gpus``. Usage
counts GPU shares (``num_gpus x gpu_milli / 1000``). A team is *borrowing* while its usage exceeds
its nominal quota; Kueue may reclaim borrowed capacity by preemption (``preemption.scope = kueue``).
"""

from __future__ import annotations

import numpy as np

from predictor.policy.config import PolicyConfig

__all__ = ["QuotaBook"]


class QuotaBook:
    """Nominal quotas and usage per team code for one cycle.

    Parameters
    ----------
    policy : PolicyConfig
    teams : tuple of str
        The snapshot's team vocabulary.
    running_team : ndarray of int64
    running_gpus : ndarray of float64
        GPUs (shares counted as fractions) held by each running job.
    total_gpus : int
        GPUs in the cluster (for ``nominal_from_shares``).
    """

    def __init__(self, policy: PolicyConfig, teams: tuple[str, ...], running_team: np.ndarray,
                 running_gpus: np.ndarray, total_gpus: int) -> None:
        cfg = policy.quotas
        self.enabled = cfg.enabled
        self.borrowing = cfg.borrowing
        # the cohort: the snapshot's teams, then configured teams with no job in the snapshot
        names = tuple(teams) + tuple(t for t in policy.teams if t not in set(teams))
        self.n_snapshot_teams = len(teams)
        n = len(names)
        self.teams = names
        nominal = np.full(n, np.inf)
        limit = np.full(n, np.inf)
        shares = np.array([policy.share_of(t) for t in names], dtype=np.float64)
        for i, name in enumerate(names):
            team = policy.teams.get(name)
            if team is not None and team.nominal_gpus is not None:
                nominal[i] = team.nominal_gpus
            elif cfg.default_nominal_gpus is not None:
                nominal[i] = cfg.default_nominal_gpus
            elif cfg.nominal_from_shares and shares.sum() > 0:
                nominal[i] = total_gpus * shares[i] / shares.sum()
            if team is not None and team.borrowing_limit_gpus is not None:
                limit[i] = team.borrowing_limit_gpus
        self.nominal = nominal
        self.borrowing_limit = limit
        ok = running_team >= 0
        self.usage = np.bincount(running_team[ok], weights=running_gpus[ok], minlength=n).astype(np.float64)

    def fits(self, team: int, demand: float) -> bool:
        """Whether ``demand`` GPUs more keep ``team`` within its quota (borrowing included)."""
        if not self.enabled or team < 0 or not np.isfinite(self.nominal[team]):
            return True
        after = self.usage[team] + demand
        if after <= self.nominal[team] + 1e-9:
            return True
        if not self.borrowing or after - self.nominal[team] > self.borrowing_limit[team] + 1e-9:
            return False
        finite = np.isfinite(self.nominal)
        room = self.nominal[finite].sum() - self.usage[finite].sum()
        return room >= demand - 1e-9

    def borrowing_teams(self) -> np.ndarray:
        """Boolean per snapshot team code: usage above the nominal quota."""
        return (self.usage > self.nominal + 1e-9)[:self.n_snapshot_teams]

    def add(self, team: int, demand: float) -> None:
        if team >= 0:
            self.usage[team] += demand

    def remove(self, team: int, demand: float) -> None:
        if team >= 0:
            self.usage[team] -= demand

    def describe(self, team: int) -> str:
        if team < 0 or not np.isfinite(self.nominal[team]):
            return "no quota"
        return f"team {self.teams[team]} uses {self.usage[team]:g} of {self.nominal[team]:g} nominal GPUs"
