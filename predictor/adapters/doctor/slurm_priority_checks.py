"""Doctor checks of a Slurm cluster's priority set-up against the policy: the multifactor weights,
the QoS that stand for the tiers, the accounts that stand for the teams and their fair-share.

What the policy wants in Slurm is what ``predictor slurm config`` generates
(:mod:`predictor.adapters.slurm.config`); each fix names those lines or commands.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

from predictor.adapters.doctor.expectations import Expectations, out_of_proportion, proportions
from predictor.adapters.doctor.findings import Check, Finding, Severity
from predictor.adapters.doctor.slurm_picture import SlurmPicture
from predictor.adapters.slurm.config import (
    QOS_PRIORITY_SCALE,
    account_commands,
    priority_weight_lines,
    qos_commands,
)

__all__ = ["PRIORITY_CHECKS", "wanted_slurm_conf", "slurm_duration_s"]

#: The policy factors Slurm's multifactor plugin has, and the slurm.conf key of each.
MAPPED = {"tier": "PriorityWeightQOS", "age": "PriorityWeightAge", "fairshare": "PriorityWeightFairshare"}
#: Slurm factors the policy has no counterpart of (the generated slurm.conf sets them to 0).
UNMAPPED = ("PriorityWeightJobSize", "PriorityWeightPartition", "PriorityWeightAssoc")


def wanted_slurm_conf(exp: Expectations) -> dict[str, str]:
    """``{key: value}`` of the slurm.conf lines ``predictor slurm config`` writes for the policy."""
    out = {}
    for line in priority_weight_lines(exp.policy):
        key, sep, value = line.split("#", 1)[0].strip().partition("=")
        if sep:
            out[key] = value.strip()
    return out


def _get(pic: SlurmPicture, key: str) -> str | None:
    """A ``scontrol show config`` value by slurm.conf key, case-insensitively (``Fairshare`` vs ``FairShare``)."""
    lowered = {k.lower(): v for k, v in pic.config.items()}
    return lowered.get(key.lower())


def _weight(pic: SlurmPicture, key: str) -> int:
    value = _get(pic, key) or "0"
    return int(value) if value.isdigit() else 0


def slurm_duration_s(text: str | None) -> float | None:
    """``7-00:00:00`` / ``01:30:00`` / ``30`` (minutes) as seconds; None for ``NONE``/unparsable."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", (text or "").strip())
    if m:
        days, h, mi, s = (int(g or 0) for g in m.groups())
        return float(((days * 24 + h) * 60 + mi) * 60 + s)
    return float(text) * 60 if text and text.strip().isdigit() else None


def _conf_fix(pic: SlurmPicture, exp: Expectations, keys: tuple[str, ...]) -> str:
    wanted = wanted_slurm_conf(exp)
    lines = " ".join(f"{k}={wanted.get(k, '0')}" for k in keys)  # a weight the generator leaves out is 0
    return (f"set {lines} in {pic.slurm_conf} (`predictor slurm config{exp.policy_option()}` prints them), "
            "then `scontrol reconfigure`")


def _finding(check: str, severity: Severity, subject: str, evidence: str, fix: str) -> Finding:
    return Finding(check, severity, subject, evidence, fix)


def priority_weights_zero(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """``priority/basic``, or every ``PriorityWeight*`` 0: jobs start in submit order, no factor counts."""
    ptype = _get(pic, "PriorityType") or ""
    weights = {k: _weight(pic, k) for k in (*MAPPED.values(), *UNMAPPED)}
    fix = _conf_fix(pic, exp, ("PriorityType", *MAPPED.values()))
    if ptype != "priority/multifactor":
        yield _finding("slurm-priority-weights-zero", Severity.ERROR, f"PriorityType={ptype or '(unset)'}",
                       "Slurm orders jobs by submit time only: tiers, age and fair-share of the policy do not count",
                       fix)
    elif not any(weights.values()):
        yield _finding("slurm-priority-weights-zero", Severity.ERROR, "PriorityWeight*",
                       "every multifactor weight is 0 (" + ", ".join(f"{k}=0" for k in weights)
                       + "): every job gets the same priority", fix)


def weights_vs_policy(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """Slurm's weights in other proportions than the policy's, factors the policy lacks, age cap and half-life."""
    if (_get(pic, "PriorityType") or "") != "priority/multifactor":
        return
    slurm = {f: float(_weight(pic, k)) for f, k in MAPPED.items()}
    if not any(slurm.values()) and not any(_weight(pic, k) for k in UNMAPPED):
        return  # slurm-priority-weights-zero says so
    policy = {f: float(exp.policy.weights.get(f, 0.0)) for f in MAPPED}
    off = out_of_proportion(slurm, policy)
    if off:
        yield _finding(
            "slurm-weights-contradict-policy", Severity.WARNING, "PriorityWeightQOS/Age/Fairshare",
            f"Slurm QOS:Age:Fairshare = {proportions(slurm)}; policy tier:age:fairshare = {proportions(policy)}; "
            f"out of proportion: {', '.join(off)}", _conf_fix(pic, exp, tuple(MAPPED.values())))
    for key in UNMAPPED:
        if _weight(pic, key) > 0:
            yield _finding("slurm-weights-contradict-policy", Severity.WARNING, key,
                           f"{key}={_weight(pic, key)} adds a factor the policy does not have", _conf_fix(pic, exp, (key,)))
    wanted = wanted_slurm_conf(exp)
    for key, factor in (("PriorityMaxAge", "age"), ("PriorityDecayHalfLife", "fairshare")):
        have, want = slurm_duration_s(_get(pic, key)), slurm_duration_s(wanted[key])
        if policy[factor] > 0 and have is not None and want and abs(have - want) > 0.01 * want:
            yield _finding("slurm-weights-contradict-policy", Severity.WARNING, key,
                           f"{key}={_get(pic, key)} but the policy's {factor} setting means {wanted[key]}",
                           _conf_fix(pic, exp, (key,)))


def _qos_of_tiers(pic: SlurmPicture, exp: Expectations) -> dict[str, tuple[str, int] | None]:
    """tier -> (QoS name, priority) of the first of its names that sacctmgr has, or None."""
    have = {q.name.lower(): q for q in pic.qos}
    out: dict[str, tuple[str, int] | None] = {}
    for tier in exp.policy.tiers:
        found = next((have[n.lower()] for n in exp.names_of(tier) if n.lower() in have), None)
        out[tier.name] = (found.name, found.priority) if found else None
    return out


def _tier_qos_commands(pic: SlurmPicture, exp: Expectations, tier: str) -> list[list[str]]:
    """``predictor slurm config``'s sacctmgr lines for one tier, naming other tiers' QoS as the cluster has them."""
    names = {t: found[0] for t, found in _qos_of_tiers(pic, exp).items() if found}
    return [c for c in qos_commands(exp.policy, names) if f"name={tier}" in c or c[2:] == ["add", "qos", tier]]


def qos_missing(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """A tier with no QoS by its name or any of its aliases: jobs of that tier cannot be given it."""
    have = ", ".join(sorted(q.name for q in pic.qos)) or "none"
    for tier, found in _qos_of_tiers(pic, exp).items():
        if found is None:
            names = exp.names_of(exp.policy.tier(tier))
            yield _finding("slurm-qos-missing", Severity.ERROR, f"tier {tier}",
                           f"no QoS named {' or '.join(names)}; sacctmgr lists {have}",
                           " && ".join(shlex.join(c) for c in _tier_qos_commands(pic, exp, tier)))


def qos_priority_order(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """QoS priorities that do not rise with the tiers' ranks: PriorityWeightQOS then inverts (or ties) them."""
    found = _qos_of_tiers(pic, exp)
    ranked = sorted((t for t in exp.policy.tiers if found[t.name]), key=lambda t: -t.rank)
    for higher, lower in zip(ranked, ranked[1:], strict=False):
        (hq, hp), (lq, lp) = found[higher.name], found[lower.name]  # type: ignore[misc]
        if higher.rank > lower.rank and hp <= lp:
            cmds = [["sacctmgr", "-i", "modify", "qos", "where", f"name={q}", "set",
                     f"Priority={int(round(t.rank * QOS_PRIORITY_SCALE))}"] for q, t in ((hq, higher), (lq, lower))]
            yield _finding("slurm-qos-priority-order", Severity.WARNING, f"QoS {hq} / {lq}",
                           f"tier {higher.name} (rank {higher.rank:g}) has QoS {hq} at priority {hp}, not above "
                           f"tier {lower.name} (rank {lower.rank:g}), QoS {lq} at priority {lp}",
                           " && ".join(shlex.join(c) for c in cmds))


def _account_command(exp: Expectations, team: str) -> list[str]:
    return next(c for c in account_commands(exp.policy) if f"name={team}" in c)


def team_without_account(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """A policy team with no Slurm account on this cluster: its jobs are refused (``-A team``)."""
    have = {a.name.lower() for a in pic.accounts}
    for team in exp.policy.teams:
        if team.name.lower() not in have:
            yield _finding("slurm-team-without-account", Severity.WARNING, f"team {team.name}",
                           f"no account {team.name.lower()} in sacctmgr (accounts: {', '.join(sorted(have)) or 'none'})",
                           f"sacctmgr -i add account {shlex.quote(team.name)} && "
                           + shlex.join(_account_command(exp, team.name)))


def account_without_team(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """A Slurm account the policy does not name: its jobs get the default share and no quota in the rules layer."""
    teams = {t.name.lower() for t in exp.policy.teams}
    where = exp.policy_file or "the policy file"
    for account in pic.accounts:
        if account.name.lower() not in teams:
            yield _finding("slurm-account-without-team", Severity.WARNING, f"account {account.name}",
                           f"account {account.name} (Fairshare={account.fairshare}) is not a team of the policy",
                           f"add `{account.name}: {{share: 1}}` under teams: in {where} (or remove the account: "
                           f"`sacctmgr -i delete account {shlex.quote(account.name)}`)")


def fairshare_unbalanced(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """Accounts' Fairshare values in other proportions than the policy's team shares."""
    accounts = {a.name.lower(): a for a in pic.accounts}
    pairs = [(t, accounts[t.name.lower()].fairshare_value) for t in exp.policy.teams if t.name.lower() in accounts]
    pairs = [(t, v) for t, v in pairs if v is not None and v > 0]
    if len(pairs) < 2:
        return
    have = {t.name: v for t, v in pairs}
    if not out_of_proportion(have, {t.name: t.share for t, _ in pairs}):
        return
    evidence = (f"Fairshare {':'.join(have)} = {proportions(have)}; policy shares = "
                f"{proportions({t.name: t.share for t, _ in pairs})}")
    for team, value in pairs:
        command = _account_command(exp, team.name)
        if f"Fairshare={value:g}" not in command:  # the account whose value is not the generated one
            yield _finding("slurm-fairshare-unbalanced", Severity.WARNING, f"account {team.name.lower()}",
                           evidence, shlex.join(command))


PRIORITY_CHECKS: tuple[Check[SlurmPicture, Expectations], ...] = (
    Check("slurm-priority-weights-zero", "multifactor priority off or all weights 0", priority_weights_zero),
    Check("slurm-weights-contradict-policy", "PriorityWeight* out of the policy's proportions", weights_vs_policy),
    Check("slurm-qos-missing", "a tier without a QoS", qos_missing),
    Check("slurm-qos-priority-order", "QoS priorities against the tiers' ranks", qos_priority_order),
    Check("slurm-team-without-account", "a policy team without an account", team_without_account),
    Check("slurm-account-without-team", "an account the policy does not name", account_without_team),
    Check("slurm-fairshare-unbalanced", "Fairshare against the policy's shares", fairshare_unbalanced),
)
