"""A read-only picture of a Slurm cluster's configuration, for the doctor's checks.

=====================  ===============================================================
part                   read with
=====================  ===============================================================
``config``             ``scontrol show config`` (``PriorityType``, ``PriorityWeight*``, ...)
``nodes``              ``scontrol show nodes -o`` (state, partitions, GPU gres by type)
``partitions``         ``scontrol show partition -o`` (state, default)
``qos``                ``sacctmgr show qos`` (name, priority)
``accounts``           ``sacctmgr show association`` (account-level rows of this cluster:
                       fair-share, ``GrpTRES`` GPU limit)
``pending``            ``squeue --json`` (pending jobs: account, partition, GPUs, the GPU
                       type as the job spelled it, the pending reason)
``gres_conf``          the ``gres.conf`` beside ``slurm.conf`` (or the one given)
=====================  ===============================================================

Reading goes through :class:`~predictor.adapters.slurm.commands.SlurmCommands`; the checks read only
the picture, which is plain data (``to_json`` / ``from_json`` record and replay it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from features.sources.slurm_fields import gpu_type_from_gres
from predictor.adapters.slurm.commands import SlurmCommands
from predictor.adapters.slurm.discovery import parse_node_line
from predictor.adapters.slurm.state import canonical_rows, jobs_from_squeue

__all__ = ["GresEntry", "SlurmNode", "SlurmPartition", "SlurmQos", "SlurmAccount", "SlurmPendingJob",
           "GresConfLine", "GresConf", "SlurmPicture", "read_slurm_picture", "parse_config", "parse_gres",
           "parse_gres_conf"]

#: Node state words under which a node runs no new job.
UNAVAILABLE_NODE_STATES = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE",
                                     "INVAL", "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "REBOOT_REQUESTED"})
_TOP_LEVEL_COMMA = re.compile(r",(?![^()]*\))")


@dataclass(frozen=True, slots=True)
class GresEntry:
    """One GPU gres of a node: its type (None when untyped) and count."""

    type: str | None
    count: int


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    state: str
    partitions: tuple[str, ...] = ()
    gpus: tuple[GresEntry, ...] = ()

    @property
    def gpu_count(self) -> int:
        return sum(g.count for g in self.gpus)

    @property
    def available(self) -> bool:
        """Not down, drained, failed or powered off (``IDLE+DRAIN`` is unavailable)."""
        words = set(re.split(r"[+*~#!%$@^-]+", self.state.upper())) - {""}
        return not (words & UNAVAILABLE_NODE_STATES)


@dataclass(frozen=True, slots=True)
class SlurmPartition:
    name: str
    state: str
    default: bool = False


@dataclass(frozen=True, slots=True)
class SlurmQos:
    name: str
    priority: int = 0


@dataclass(frozen=True, slots=True)
class SlurmAccount:
    """An account's own association on this cluster (``fairshare`` as sacctmgr prints it)."""

    name: str
    fairshare: str = "1"
    gpu_limit: int | None = None  # GrpTRES gres/gpu

    @property
    def fairshare_value(self) -> float | None:
        """The number of shares, or None for ``parent`` (shares of the parent account)."""
        try:
            return float(self.fairshare)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class SlurmPendingJob:
    job_id: str
    account: str
    partition: str
    qos: str
    gpus: int
    gpu_request: str | None  # the GPU type as the job asked for it (``--gres=gpu:A10:2`` -> ``A10``)
    reason: str


@dataclass(frozen=True, slots=True)
class GresConfLine:
    """One non-blank line of gres.conf; ``fields`` has lower-case keys."""

    number: int
    text: str
    fields: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GresConf:
    path: str
    exists: bool
    lines: tuple[GresConfLine, ...] = ()


@dataclass(frozen=True)
class SlurmPicture:
    """What the Slurm commands returned, parsed (see the module docstring)."""

    config: Mapping[str, str]
    nodes: tuple[SlurmNode, ...] = ()
    partitions: tuple[SlurmPartition, ...] = ()
    qos: tuple[SlurmQos, ...] = ()
    accounts: tuple[SlurmAccount, ...] = ()
    pending: tuple[SlurmPendingJob, ...] = ()
    gres_conf: GresConf | None = None

    @property
    def slurm_conf(self) -> str:
        return self.config.get("SLURM_CONF", "/etc/slurm/slurm.conf")

    def to_json(self) -> str:
        return _ADAPTER.dump_json(self, indent=1).decode()

    @classmethod
    def from_json(cls, text: str) -> SlurmPicture:
        return _ADAPTER.validate_python(json.loads(text))


_ADAPTER = TypeAdapter(SlurmPicture)


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` as ``{key: value}`` (first occurrence of each key)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        key = key.strip()
        if sep and key and " " not in key:
            out.setdefault(key, value.strip())
    return out


def parse_gres(gres: str) -> tuple[GresEntry, ...]:
    """A node's ``Gres=`` (``gpu:a10:4(S:0-1),gpu:2``) as its GPU entries; other gres are left out."""
    out = []
    for part in _TOP_LEVEL_COMMA.split(gres or ""):
        fields = re.sub(r"\(.*\)$", "", part.strip()).split(":")
        if fields[0] != "gpu" or len(fields) < 2 or not fields[-1].isdigit():
            continue
        out.append(GresEntry(fields[1] if len(fields) >= 3 else None, int(fields[-1])))
    return tuple(out)


def parse_gres_conf(path: Path) -> GresConf:
    """gres.conf's lines with their ``Key=Value`` fields (comments dropped); a missing file is recorded as such."""
    if not path.is_file():
        return GresConf(str(path), exists=False)
    lines = []
    for number, raw in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        fields = {k.lower(): v for k, sep, v in (tok.partition("=") for tok in text.split()) if sep}
        lines.append(GresConfLine(number, text, fields))
    return GresConf(str(path), exists=True, lines=tuple(lines))


def _sacctmgr(commands: SlurmCommands, *args: str) -> list[list[str]]:
    out = commands.run(["sacctmgr", "-n", "-P", "show", *args])
    return [line.split("|") for line in out.splitlines() if line.strip()]


def _gpu_limit(grp_tres: str) -> int | None:
    for item in grp_tres.split(","):
        key, _, value = item.partition("=")
        if key.strip() in ("gres/gpu", "gres/gpu:") and value.strip().isdigit():
            return int(value)
    return None


def _pending(doc: dict[str, Any]) -> tuple[SlurmPendingJob, ...]:
    jobs = [j for j in jobs_from_squeue(doc).values() if j.pending]
    if not jobs:
        return ()
    rows = canonical_rows(jobs).set_index("job_id")  # GPUs read as the adapter reads them
    out = []
    for j in jobs:
        gpus = rows.loc[j.job_id, "num_gpus"]
        out.append(SlurmPendingJob(
            job_id=j.job_id, account=j.account, partition=j.partition, qos=j.qos,
            gpus=int(gpus) if gpus == gpus else 0, gpu_request=gpu_type_from_gres(j.raw.get("tres_per_node")),
            reason=str(j.raw.get("state_reason") or "")))
    return tuple(out)


def read_slurm_picture(commands: SlurmCommands, gres_conf: Path | None = None) -> SlurmPicture:
    """Run the commands of the module docstring and parse what they print.

    Raises
    ------
    SchedulerUnavailable, SchedulerRejected
        From :class:`SlurmCommands` (controller unreachable, command missing or refused).
    """
    config = parse_config(commands.run(["scontrol", "show", "config"]))
    nodes = []
    for line in commands.run(["scontrol", "show", "nodes", "-o"]).splitlines():
        f = parse_node_line(line)
        if f.get("NodeName"):
            nodes.append(SlurmNode(name=f["NodeName"], state=f.get("State", ""),
                                   partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
                                   gpus=parse_gres(f.get("Gres", ""))))
    partitions = []
    for line in commands.run(["scontrol", "show", "partition", "-o"]).splitlines():
        f = parse_node_line(line)
        if f.get("PartitionName"):
            partitions.append(SlurmPartition(f["PartitionName"], f.get("State", ""), f.get("Default") == "YES"))
    qos = tuple(SlurmQos(name, int(float(prio or 0))) for name, prio in _sacctmgr(commands, "qos", "format=Name,Priority"))
    cluster = config.get("ClusterName", "")
    accounts = tuple(
        SlurmAccount(account, fairshare or "1", _gpu_limit(grp))
        for clu, account, user, fairshare, grp in _sacctmgr(
            commands, "association", "format=Cluster,Account,User,Fairshare,GrpTRES")
        if not user and account != "root" and (not cluster or clu == cluster))
    pending = _pending(commands.run_json(["squeue", "--json"]))
    conf_path = gres_conf or Path(config.get("SLURM_CONF", "/etc/slurm/slurm.conf")).parent / "gres.conf"
    return SlurmPicture(config=config, nodes=tuple(nodes), partitions=tuple(partitions), qos=qos,
                        accounts=accounts, pending=pending, gres_conf=parse_gres_conf(conf_path))
