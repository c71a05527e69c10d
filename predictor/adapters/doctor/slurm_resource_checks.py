"""Doctor checks of a Slurm cluster's resources: partitions and nodes that run nothing, GPU gres types
that no job asks for, gres.conf lines without ``Cores=``, account GPU limits (``GrpTRES``) that can
never admit a pending job or the largest job of the history, and the inventory against the nodes.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator

from predictor.adapters.doctor.expectations import Expectations
from predictor.adapters.doctor.findings import Check, Finding, Severity
from predictor.adapters.doctor.inventory_drift import inventory_drift
from predictor.adapters.doctor.slurm_picture import SlurmPicture

__all__ = ["RESOURCE_CHECKS"]

#: gres.conf ``AutoDetect`` values under which slurmd reads GPU core affinity itself.
AUTODETECT_AFFINITY = frozenset({"nvml", "rsmi", "oneapi", "nrt"})


def partition_down(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """A partition not UP: its jobs stay pending (``PartitionDown``/``PartitionInactive``)."""
    for part in pic.partitions:
        if part.state.upper() == "UP":
            continue
        waiting = [j.job_id for j in pic.pending if part.name in j.partition.split(",")]
        severity = Severity.ERROR if waiting or part.default else Severity.WARNING
        evidence = f"State={part.state}" + (" (the default partition)" if part.default else "")
        if waiting:
            evidence += f"; {len(waiting)} pending job(s) wait on it: {', '.join(waiting[:5])}"
        yield Finding("slurm-partition-down", severity, f"partition {part.name}", evidence,
                      f"scontrol update partitionname={shlex.quote(part.name)} state=up")


def node_unavailable(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """A GPU node that is down, drained or failed: its GPUs count for nothing."""
    for node in pic.nodes:
        if node.gpu_count and not node.available:
            yield Finding("slurm-node-unavailable", Severity.WARNING, f"node {node.name}",
                          f"State={node.state}: its {node.gpu_count} GPU(s) run no job",
                          f"scontrol update nodename={shlex.quote(node.name)} state=resume  # once it is healthy")


def _types_of(exp: Expectations, name: str) -> set[str]:
    """Every canonical type a name may mean (a family name like ``a100`` means several), else the name."""
    return set(exp.vocabulary.matches(name)) or {name}


def gres_type_unrequested(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """A gres GPU type none of the typed requests (history and queue) asks for, compared by canonical type;
    a pending job whose spelling matches no gres type exactly (Slurm compares type names as written)."""
    vocab = exp.vocabulary
    asked: dict[str, int] = dict(exp.history.requested_types) if exp.history else {}
    spelled: dict[str, list[str]] = {}
    for job in pic.pending:
        if job.gpu_request:
            key = vocab.canonical_or_none(job.gpu_request) or job.gpu_request
            asked[key] = asked.get(key, 0) + 1
            spelled.setdefault(job.gpu_request, []).append(job.job_id)
    if not asked:
        return  # nobody asks for a type: untyped requests may use every one
    types: dict[str, list[str]] = {}
    for node in pic.nodes:
        for g in node.gpus:
            if g.type:
                types.setdefault(g.type, []).append(node.name)
    gres_conf = pic.gres_conf.path if pic.gres_conf else "gres.conf"
    shown = ", ".join(f"{t} ({n})" for t, n in sorted(asked.items(), key=lambda kv: -kv[1])[:6])
    asked_types = {t for name in asked for t in _types_of(exp, name)}
    for gres_type, nodes in sorted(types.items()):
        key = vocab.canonical_or_none(gres_type) or gres_type
        if _types_of(exp, gres_type) & asked_types:
            continue
        yield Finding("slurm-gres-type-unrequested", Severity.WARNING, f"gres type {gres_type}",
                      f"{gres_type} ({key}) on {', '.join(sorted(nodes)[:5])} is asked for by none of "
                      f"{sum(asked.values())} typed GPU requests: {shown}",
                      f"if jobs should use it, ask for it as Slurm spells it (--gres=gpu:{gres_type}:N); if not, "
                      f"drop Type={gres_type} from {gres_conf} and Gres= of its nodes in slurm.conf, then "
                      "`scontrol reconfigure`")
    exact = set(types)
    for request, jobs in sorted(spelled.items()):
        if request in exact:
            continue
        key = vocab.canonical_or_none(request)
        same = sorted(t for t in exact if (vocab.canonical_or_none(t) or t) == key) if key else []
        yield Finding("slurm-gres-type-unrequested", Severity.ERROR, f"request gpu:{request}",
                      f"pending job(s) {', '.join(jobs[:5])} ask for gpu:{request}; nodes have "
                      f"{', '.join(sorted(exact)) or 'untyped GPUs only'} (type names are compared as written)",
                      f"scancel {' '.join(jobs[:5])} and resubmit with --gres=gpu:{same[0] if same else '<type>'}:N")


def gres_without_cores(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """GPU lines of gres.conf without ``Cores=``: tasks are not bound to the GPU's own cores (NUMA)."""
    if pic.gres_conf is None or not any(n.gpu_count for n in pic.nodes):
        return
    fix = ("on each GPU node run `predictor node-info --json > node.json`, then `predictor slurm config "
           "--topology node.json --node-name NODE` prints its gres.conf lines with Cores=; put them in "
           f"{pic.gres_conf.path} and `scontrol reconfigure`")
    if not pic.gres_conf.exists:
        yield Finding("slurm-gres-without-cores", Severity.WARNING, f"gres.conf {pic.gres_conf.path}",
                      "no gres.conf: GPUs are counted only, with no device files and no core affinity", fix)
        return
    if any(line.fields.get("autodetect", "").lower() in AUTODETECT_AFFINITY for line in pic.gres_conf.lines):
        return
    for line in pic.gres_conf.lines:
        if line.fields.get("name") == "gpu" and "cores" not in line.fields:
            where = line.fields.get("nodename", "every node")
            yield Finding("slurm-gres-without-cores", Severity.WARNING, f"gres.conf:{line.number} ({where})",
                          f"`{line.text}` has no Cores=", fix)


def _limit_fix(account: str, gpus: int) -> str:
    return f"sacctmgr -i modify account where name={shlex.quote(account)} set GrpTRES=gres/gpu={gpus}"


def quota_too_small(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """A pending job asking more GPUs than its account's ``GrpTRES`` allows: it waits forever (``AssocGrpGRES``)."""
    limits = {a.name.lower(): a.gpu_limit for a in pic.accounts}
    for job in pic.pending:
        limit = limits.get(job.account.lower())
        if limit is not None and job.gpus > limit:
            yield Finding("slurm-quota-too-small", Severity.ERROR, f"account {job.account}",
                          f"job {job.job_id} asks {job.gpus} GPUs; GrpTRES=gres/gpu={limit} never lets it start "
                          f"(reason {job.reason or 'none'})", _limit_fix(job.account, job.gpus))


def quota_below_largest_job(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    """An account GPU limit below the largest job its team ran: a job that size would now wait forever."""
    assert exp.history is not None  # needs=("jobs",)
    limits = {a.name.lower(): (a.name, a.gpu_limit) for a in pic.accounts}
    for team, largest in sorted(exp.history.largest.items()):
        name, limit = limits.get(team.lower(), (team, None))
        if limit is not None and largest.gpus > limit:
            yield Finding("slurm-quota-below-largest-job", Severity.ERROR, f"account {name}",
                          f"the largest job of {team} in the history ({largest.job_id}) had {largest.gpus} GPUs; "
                          f"GrpTRES=gres/gpu={limit}", _limit_fix(name, largest.gpus))


def slurm_inventory_drift(pic: SlurmPicture, exp: Expectations) -> Iterator[Finding]:
    live = {n.name: (n.gpus[0].type if len({g.type for g in n.gpus}) == 1 else None, n.gpu_count) for n in pic.nodes}
    yield from inventory_drift(live, exp, f"predictor inventory --from-slurm --slurm-conf {pic.slurm_conf} "
                               "--out {out} --force")


RESOURCE_CHECKS: tuple[Check[SlurmPicture, Expectations], ...] = (
    Check("slurm-partition-down", "partitions not UP", partition_down),
    Check("slurm-node-unavailable", "GPU nodes down or drained", node_unavailable),
    Check("slurm-gres-type-unrequested", "gres GPU types no job asks for", gres_type_unrequested),
    Check("slurm-gres-without-cores", "gres.conf GPUs without Cores=", gres_without_cores),
    Check("slurm-quota-too-small", "GrpTRES below a pending job", quota_too_small),
    Check("slurm-quota-below-largest-job", "GrpTRES below the history's largest job", quota_below_largest_job,
          needs=("jobs",)),
    Check("inventory-drift", "the inventory against the nodes", slurm_inventory_drift, needs=("inventory",)),
)
