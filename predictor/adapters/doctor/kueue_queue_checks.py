"""Doctor checks of a Kueue cluster's queues against its workloads and the policy: quotas that can never
admit a pending workload or the history's largest job, jobs without (or with a wrong)
``kueue.x-k8s.io/queue-name``, LocalQueues pointing at missing ClusterQueues, and the quota-side
mirror of the policy: fair-sharing weights, a priority class per tier, a queue per team.

Team ``t`` is namespace ``dns_name(t)`` with ClusterQueue ``dns_name(t)``, as ``predictor kueue
manifests`` names them (:class:`~predictor.adapters.kueue.manifests.KueueNaming`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

from predictor.adapters.cluster_policy import dns_name
from predictor.adapters.doctor.expectations import Expectations, out_of_proportion, proportions
from predictor.adapters.doctor.findings import Check, Finding, Severity
from predictor.adapters.doctor.kueue_picture import KueuePicture, quantity
from predictor.adapters.kueue.adapter import QUEUE_LABEL
from predictor.adapters.kueue.manifests import local_queues, priority_classes
from predictor.adapters.kueue.workloads import workload_from_object, workload_rows

__all__ = ["QUEUE_CHECKS"]


def _apply_command(exp: Expectations) -> str:
    return f"predictor kueue apply{exp.policy_option()}{exp.inventory_option()}"


def _kubectl_apply(obj: dict[str, Any]) -> str:
    return f"echo {shlex.quote(json.dumps(obj, separators=(',', ':')))} | kubectl apply -f -"


def _ceiling(pic: KueuePicture, cq: str, pod_sets: int = 1) -> float:
    """The most GPUs ``cq`` can admit for one workload: in one flavor, or over all of them for several pod sets."""
    admissible = pic.admissible(cq)
    return (max(admissible.values(), default=0.0) if pod_sets <= 1 else sum(admissible.values()))


def _raise_quota_fix(pic: KueuePicture, exp: Expectations, cq: str, gpus: float) -> str:
    """A JSON patch raising the nominal quota of the flavor that admits most, so ``gpus`` fit."""
    quotas = pic.gpu_quotas(pic.cluster_queues()[cq])
    if not quotas:
        return f"{_apply_command(exp)} (the ClusterQueue covers no nvidia.com/gpu)"
    admissible = pic.admissible(cq)
    best = max(quotas, key=lambda q: (admissible.get(q.flavor, 0.0), q.flavor))
    value = best.nominal + gpus - admissible.get(best.flavor, 0.0)
    patch = [{"op": "replace", "path": f"{best.path}/nominalQuota", "value": int(value) if value == int(value) else value}]
    return f"kubectl patch clusterqueue {cq} --type json -p {shlex.quote(json.dumps(patch))}"


def _capacity_note(pic: KueuePicture, gpus: float) -> str:
    nodes = pic.node_gpus()
    best = max(((f, sum(nodes[n][1] for n in pic.selected_nodes(labels))) for f, labels in pic.flavor_labels().items()),
               key=lambda kv: kv[1], default=None)
    if best is not None and best[1] < gpus:
        return f"; no flavor's nodes hold that many either (largest: {best[0]}, {best[1]} GPUs)"
    return ""


def _quota_text(pic: KueuePicture, cq: str) -> str:
    quotas = pic.gpu_quotas(pic.cluster_queues()[cq])
    admissible = pic.admissible(cq)
    return ", ".join(f"{q.flavor}: nominal {q.nominal:g}, at most {admissible[q.flavor]:g} with borrowing"
                     for q in quotas) or "no nvidia.com/gpu quota"


def quota_too_small(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A pending workload asking more GPUs than its ClusterQueue can ever admit: it stays inadmissible."""
    lqs, cqs = pic.local_queues(), pic.cluster_queues()
    pending = [w for w in (workload_from_object(o) for o in pic.of("Workload")) if w.pending]
    if not pending:
        return
    rows = workload_rows(pending)  # GPUs read as the adapter reads them
    gpus = dict(zip(rows["job_id"], rows["num_gpus"], strict=True))
    for w in pending:
        cq = ((lqs.get((w.namespace, w.queue_name or "")) or {}).get("spec") or {}).get("clusterQueue")
        need = float(gpus.get(w.job_id) or 0.0)
        if cq not in cqs or need <= 0:
            continue
        pod_sets = len((w.raw.get("spec") or {}).get("podSets") or [])
        if need > _ceiling(pic, cq, pod_sets):
            yield Finding("kueue-quota-too-small", Severity.ERROR, f"ClusterQueue {cq}",
                          f"workload {w.job_id} asks {need:g} GPUs; {cq} has {_quota_text(pic, cq)}"
                          + _capacity_note(pic, need), _raise_quota_fix(pic, exp, cq, need))


def _team_queues(pic: KueuePicture, team: str) -> list[str]:
    """The ClusterQueues a team's namespace reaches through its LocalQueues (existing ones only)."""
    ns, cqs = pic.naming.namespace(team), pic.cluster_queues()
    found = [(lq.get("spec") or {}).get("clusterQueue") for (n, _), lq in sorted(pic.local_queues().items()) if n == ns]
    return list(dict.fromkeys(c for c in found if c in cqs))


def quota_below_largest_job(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A team whose ClusterQueues can never admit the largest job it ran: a job that size would stay inadmissible."""
    assert exp.history is not None  # needs=("jobs",)
    for team, largest in sorted(exp.history.largest.items()):
        queues = _team_queues(pic, team)
        if not queues:
            continue
        best = max(queues, key=lambda q: (_ceiling(pic, q), q))
        if largest.gpus > _ceiling(pic, best):
            yield Finding("kueue-quota-below-largest-job", Severity.ERROR, f"ClusterQueue {best}",
                          f"the largest job of {team} in the history ({largest.job_id}) had {largest.gpus} GPUs; "
                          f"{best} has {_quota_text(pic, best)}" + _capacity_note(pic, largest.gpus),
                          _raise_quota_fix(pic, exp, best, largest.gpus))


def _kueue_namespaces(pic: KueuePicture, exp: Expectations) -> set[str]:
    return {ns for ns, _ in pic.local_queues()} | {pic.naming.namespace(t.name) for t in exp.policy.teams}


def _finished(job: dict[str, Any]) -> bool:
    status = job.get("status") or {}
    return bool(status.get("completionTime")) or any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in status.get("conditions") or [])


def _queue_for(pic: KueuePicture, ns: str) -> str:
    names = sorted(name for n, name in pic.local_queues() if n == ns)
    return pic.naming.local_queue if pic.naming.local_queue in names or not names else names[0]


def job_without_queue_name(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A Job in a team namespace without ``kueue.x-k8s.io/queue-name``: Kueue ignores it (never admits a
    suspended one; an unsuspended one runs outside every quota)."""
    namespaces = _kueue_namespaces(pic, exp)
    for job in pic.of("Job"):
        meta = job.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name")
        if ns not in namespaces or QUEUE_LABEL in (meta.get("labels") or {}) or _finished(job):
            continue
        suspended = bool((job.get("spec") or {}).get("suspend"))
        yield Finding("kueue-job-without-queue-name", Severity.ERROR if suspended else Severity.WARNING,
                      f"Job {ns}/{name}",
                      f"no {QUEUE_LABEL} label; " + ("it is suspended, so it is never admitted" if suspended
                                                      else "it runs outside Kueue's quotas"),
                      shlex.join(["kubectl", "label", "job", "-n", ns, name, f"{QUEUE_LABEL}={_queue_for(pic, ns)}"]))


def queue_name_unknown(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A Job label or Workload ``queueName`` naming a LocalQueue its namespace lacks: never admitted."""
    lqs = pic.local_queues()
    jobs = set()
    for job in pic.of("Job"):
        meta = job.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name")
        jobs.add((ns, name))
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if queue is None or (ns, queue) in lqs or _finished(job):
            continue
        yield Finding("kueue-queue-name-unknown", Severity.ERROR, f"Job {ns}/{name}",
                      f"{QUEUE_LABEL}={queue}, but namespace {ns} has no LocalQueue {queue}"
                      f" (it has: {', '.join(sorted(n for s, n in lqs if s == ns)) or 'none'})",
                      shlex.join(["kubectl", "label", "job", "-n", ns, name, "--overwrite",
                                  f"{QUEUE_LABEL}={_queue_for(pic, ns)}"]))
    for w in (workload_from_object(o) for o in pic.of("Workload")):
        if w.finished or not w.queue_name or (w.namespace, w.queue_name) in lqs or (
                w.owner_kind == "Job" and (w.namespace, w.owner_name) in jobs):
            continue
        patch = json.dumps({"spec": {"queueName": _queue_for(pic, w.namespace)}})
        yield Finding("kueue-queue-name-unknown", Severity.ERROR, f"Workload {w.job_id}",
                      f"queueName {w.queue_name}, but namespace {w.namespace} has no such LocalQueue",
                      f"kubectl patch workload -n {w.namespace} {w.name} --type merge -p {shlex.quote(patch)}")


def localqueue_missing_clusterqueue(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A LocalQueue whose ClusterQueue does not exist: nothing submitted to it is ever admitted."""
    cqs = pic.cluster_queues()
    teams = {pic.naming.namespace(t.name): t.name for t in exp.policy.teams}
    for (ns, name), lq in sorted(pic.local_queues().items()):
        target = (lq.get("spec") or {}).get("clusterQueue")
        if target in cqs:
            continue
        team = teams.get(ns)
        own = pic.naming.cluster_queue(team) if team else ns
        if own in cqs:  # spec.clusterQueue is immutable: delete the LocalQueue and create it again
            fixed = {"apiVersion": pic.naming.group_version, "kind": "LocalQueue",
                     "metadata": {"name": name, "namespace": ns}, "spec": {"clusterQueue": own}}
            fix = f"kubectl delete localqueue -n {ns} {name} && {_kubectl_apply(fixed)}"
        elif team and own == target:
            fix = f"{_apply_command(exp)} (creates ClusterQueue {own})"
        elif team:
            fix = (f"{_apply_command(exp)} (creates ClusterQueue {own}), then delete LocalQueue {ns}/{name} "
                   "and apply it again (its clusterQueue is immutable)")
        else:
            fix = (f"create ClusterQueue {target}, or add team {ns} to the policy and run {_apply_command(exp)}")
        yield Finding("kueue-localqueue-missing-clusterqueue", Severity.ERROR, f"LocalQueue {ns}/{name}",
                      f"clusterQueue {target} does not exist (ClusterQueues: {', '.join(sorted(cqs)) or 'none'})", fix)


def _team_cq(pic: KueuePicture, team: str) -> str | None:
    queues = _team_queues(pic, team)
    own = pic.naming.cluster_queue(team)
    return queues[0] if queues else (own if own in pic.cluster_queues() else None)


def fair_sharing_unbalanced(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """ClusterQueues' ``fairSharing.weight`` (1 when unset) in other proportions than the policy's team shares."""
    cqs = pic.cluster_queues()
    pairs: dict[str, tuple[Any, float]] = {}
    for team in exp.policy.teams:
        cq = _team_cq(pic, team.name)
        if cq and cq not in pairs:
            weight = quantity(((cqs[cq].get("spec") or {}).get("fairSharing") or {}).get("weight"))
            pairs[cq] = (team, 1.0 if weight is None else weight)
    if len(pairs) < 2:
        return
    have = {cq: w for cq, (_, w) in sorted(pairs.items())}
    want = {cq: t.share for cq, (t, _) in sorted(pairs.items())}
    if not out_of_proportion(have, want):
        return
    evidence = f"fairSharing.weight {':'.join(have)} = {proportions(have)}; policy shares = {proportions(want)}"
    for cq, (team, weight) in sorted(pairs.items()):
        if weight != team.share:  # the queues whose weight is not the generated one (the team's share)
            patch = json.dumps({"spec": {"fairSharing": {"weight": f"{team.share:g}"}}})
            yield Finding("kueue-fair-sharing-unbalanced", Severity.WARNING, f"ClusterQueue {cq}", evidence,
                          f"kubectl patch clusterqueue {cq} --type merge -p {shlex.quote(patch)}")


def _classes(pic: KueuePicture) -> dict[str, tuple[str, int]]:
    """class name -> (kind, value); WorkloadPriorityClasses win over PriorityClasses of the same name."""
    out = {p["metadata"]["name"]: ("PriorityClass", int(p.get("value", 0))) for p in pic.of("PriorityClass")}
    out.update({p["metadata"]["name"]: ("WorkloadPriorityClass", int(p.get("value", 0)))
                for p in pic.of("WorkloadPriorityClass")})
    return out


def _class_of_tiers(pic: KueuePicture, exp: Expectations) -> dict[str, tuple[str, str, int] | None]:
    classes = _classes(pic)
    out: dict[str, tuple[str, str, int] | None] = {}
    for tier in exp.policy.tiers:
        name = next((dns_name(n) for n in exp.names_of(tier) if dns_name(n) in classes), None)
        out[tier.name] = (name, *classes[name]) if name else None
    return out


def tier_without_priority_class(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A tier with no WorkloadPriorityClass or PriorityClass by its name or an alias: jobs cannot ask for it."""
    wanted = {o["metadata"]["name"]: o for o in priority_classes(exp.policy, pic.naming)}
    for tier, found in _class_of_tiers(pic, exp).items():
        if found is None:
            names = ", ".join(dns_name(n) for n in exp.names_of(exp.policy.tier(tier)))
            yield Finding("kueue-tier-without-priority-class", Severity.WARNING, f"tier {tier}",
                          f"no WorkloadPriorityClass or PriorityClass named {names}",
                          _kubectl_apply(wanted[dns_name(tier)]))


def priority_class_order(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """Priority class values that do not rise with the tiers' ``kueue_priority``: Kueue inverts (or ties) them."""
    found = _class_of_tiers(pic, exp)
    ranked = sorted((t for t in exp.policy.tiers if found[t.name]), key=lambda t: -t.kueue_priority)
    for higher, lower in zip(ranked, ranked[1:], strict=False):
        (hname, hkind, hval), (lname, lkind, lval) = found[higher.name], found[lower.name]  # type: ignore[misc]
        if higher.kueue_priority > lower.kueue_priority and hval <= lval:
            fixes = []
            for name, kind, tier in ((hname, hkind, higher), (lname, lkind, lower)):
                if kind == "WorkloadPriorityClass":
                    fixes.append(f"kubectl patch workloadpriorityclass {name} --type merge -p "
                                 + shlex.quote(json.dumps({"value": tier.kueue_priority})))
                else:  # a PriorityClass's value is immutable
                    fixes.append(f"kubectl delete priorityclass {name} && kubectl create priorityclass {name} "
                                 f"--value={tier.kueue_priority}")
            yield Finding("kueue-priority-class-order", Severity.WARNING, f"{hkind} {hname} / {lname}",
                          f"tier {higher.name} (kueue_priority {higher.kueue_priority}) has {hname} = {hval}, not "
                          f"above tier {lower.name} ({lower.kueue_priority}): {lname} = {lval}", " && ".join(fixes))


def team_without_queue(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A policy team whose namespace has no LocalQueue: its jobs cannot be queued."""
    have = {ns for ns, _ in pic.local_queues()}
    wanted = {o["metadata"]["namespace"]: o for o in local_queues(exp.policy, pic.naming)}
    for team in exp.policy.teams:
        ns = pic.naming.namespace(team.name)
        if ns in have:
            continue
        own = pic.naming.cluster_queue(team.name)
        fix = _kubectl_apply(wanted[ns]) if own in pic.cluster_queues() else (
            f"{_apply_command(exp)} (creates its ClusterQueue and LocalQueue)")
        yield Finding("kueue-team-without-queue", Severity.WARNING, f"team {team.name}",
                      f"namespace {ns} has no LocalQueue", fix)


def queue_without_team(pic: KueuePicture, exp: Expectations) -> Iterator[Finding]:
    """A namespace with LocalQueues the policy names no team for: default share, no quota in the rules layer."""
    teams = {pic.naming.namespace(t.name) for t in exp.policy.teams}
    where = exp.policy_file or "the policy file"
    for ns in sorted({ns for ns, _ in pic.local_queues()} - teams):
        queues = sorted(n for s, n in pic.local_queues() if s == ns)
        yield Finding("kueue-queue-without-team", Severity.WARNING, f"namespace {ns}",
                      f"LocalQueue(s) {', '.join(queues)} but no team {ns} in the policy",
                      f"add `{ns}: {{share: 1}}` under teams: in {where}")


QUEUE_CHECKS: tuple[Check[KueuePicture, Expectations], ...] = (
    Check("kueue-quota-too-small", "quota below a pending workload", quota_too_small),
    Check("kueue-quota-below-largest-job", "quota below the history's largest job", quota_below_largest_job,
          needs=("jobs",)),
    Check("kueue-job-without-queue-name", "Jobs without the queue-name label", job_without_queue_name),
    Check("kueue-queue-name-unknown", "queue names no LocalQueue has", queue_name_unknown),
    Check("kueue-localqueue-missing-clusterqueue", "LocalQueues pointing at missing ClusterQueues",
          localqueue_missing_clusterqueue),
    Check("kueue-fair-sharing-unbalanced", "fairSharing.weight against the policy's shares", fair_sharing_unbalanced),
    Check("kueue-tier-without-priority-class", "tiers without a priority class", tier_without_priority_class),
    Check("kueue-priority-class-order", "class values against the tiers' order", priority_class_order),
    Check("kueue-team-without-queue", "policy teams without a LocalQueue", team_without_queue),
    Check("kueue-queue-without-team", "queues the policy does not name", queue_without_team),
)
