"""What a Slurm cluster says about itself: its nodes (``scontrol show nodes -o``: GPU gres type and
count, CPUs, memory), its network (the switches of ``topology.conf``, or the tree and block
topologies of ``topology.yaml`` on Slurm >= 24.05), its accounts and QoS (``sacctmgr``).

Topology: a leaf switch (one listing ``Nodes=``) is the node's rack; the switch above it its block.
A ``block`` topology's block is the node's block. Host lists (``dgx[01-04]``) are expanded by
``scontrol show hostnames``, so every form Slurm accepts is read as Slurm reads it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from features.errors import InputError
from predictor.adapters.discovery import DiscoveredNode, PriorityClass
from predictor.adapters.slurm.commands import SlurmCommands

__all__ = ["slurm_nodes", "parse_node_line", "parse_gpu_gres", "topology_file", "switch_topology",
           "slurm_accounts", "slurm_qos"]

_KEY = re.compile(r" (?=[A-Za-z][A-Za-z0-9_:/]*=)")


def parse_node_line(line: str) -> dict[str, str]:
    """One ``scontrol show nodes -o`` line as ``{key: value}`` (values may hold blanks, e.g. ``OS=``)."""
    fields: dict[str, str] = {}
    for token in _KEY.split(line.strip()):
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value.strip()
    return fields


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in (*parts, cur) if p and p != "(null)"]


def parse_gpu_gres(gres: str, node: str) -> tuple[str | None, int]:
    """``gpu:a100:8(S:0-1)`` -> (``a100``, 8); ``gpu:4`` -> (None, 4); no GPU -> (None, 0).

    Raises
    ------
    InputError
        The node carries two GPU types (an inventory node holds one).
    """
    found: list[tuple[str | None, int]] = []
    for part in _split_top_level(gres or ""):
        fields = re.sub(r"\(.*\)$", "", part).split(":")
        if fields[0] != "gpu":
            continue
        count = fields[-1]
        if not count.isdigit():
            continue
        found.append((fields[1] if len(fields) == 3 else None, int(count)))
    if not found:
        return None, 0
    types = {t for t, _ in found}
    if len(types) > 1:
        raise InputError(f"node {node}: gres {gres!r} has several GPU types; an inventory node holds one "
                         "(split the node in the written inventory by hand)")
    return found[0][0], sum(n for _, n in found)


def topology_file(commands: SlurmCommands, explicit: Path | None = None) -> Path | None:
    """``explicit``, else topology.yaml or topology.conf beside slurm.conf (SLURM_CONF), if there."""
    if explicit is not None:
        if not explicit.is_file():
            raise InputError(f"--topology: {explicit} does not exist")
        return explicit
    conf = Path(commands.env.get("SLURM_CONF") or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    for name in ("topology.yaml", "topology.conf"):
        if (conf.parent / name).is_file():
            return conf.parent / name
    return None


def _hostnames(commands: SlurmCommands, hostlist: str) -> list[str]:
    return commands.run(["scontrol", "show", "hostnames", hostlist]).split()


def _conf_switches(path: Path) -> list[dict[str, str]]:
    switches = []
    for k, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        fields = {key.lower(): v for key, v in fields.items()}
        if "switchname" not in fields:
            raise InputError(f"{path}:{k}: expected SwitchName=... (with Nodes= or Switches=)")
        switches.append(fields)
    return switches


def switch_topology(path: Path, commands: SlurmCommands) -> dict[str, tuple[str | None, str | None]]:
    """node -> (rack, block) from a topology.conf or topology.yaml."""
    if path.suffix in (".yaml", ".yml"):
        return _yaml_topology(path, commands)
    switches = _conf_switches(path)
    parent: dict[str, str] = {}
    for sw in switches:
        for child in _hostnames(commands, sw["switches"]) if "switches" in sw else ():
            parent[child] = sw["switchname"]
    out: dict[str, tuple[str | None, str | None]] = {}
    for sw in switches:
        if "nodes" in sw:
            for node in _hostnames(commands, sw["nodes"]):
                out[node] = (sw["switchname"], parent.get(sw["switchname"]))
    return out


def _yaml_topology(path: Path, commands: SlurmCommands) -> dict[str, tuple[str | None, str | None]]:
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({exc})") from None
    topologies: list[dict[str, Any]] = doc if isinstance(doc, list) else []
    if not topologies:
        raise InputError(f"{path}: expected a list of topologies (Slurm's topology.yaml)")
    chosen = next((t for t in topologies if t.get("cluster_default")), topologies[0])
    out: dict[str, tuple[str | None, str | None]] = {}
    if "tree" in chosen:
        switches = (chosen["tree"] or {}).get("switches") or []
        parent = {child: sw["switch"] for sw in switches if sw.get("children")
                  for child in _hostnames(commands, sw["children"])}
        for sw in switches:
            for node in _hostnames(commands, sw["nodes"]) if sw.get("nodes") else ():
                out[node] = (sw["switch"], parent.get(sw["switch"]))
    elif "block" in chosen:
        for block in (chosen["block"] or {}).get("blocks") or []:
            for node in _hostnames(commands, block["nodes"]):
                out[node] = (None, block["block"])
    else:
        raise InputError(f"{path}: topology {chosen.get('topology')!r} is neither tree nor block")
    return out


def slurm_nodes(commands: SlurmCommands, topology: Path | None = None) -> list[DiscoveredNode]:
    """Every node ``scontrol show nodes -o`` lists, with its rack and block from ``topology``."""
    where = switch_topology(topology, commands) if topology is not None else {}
    nodes = []
    for line in commands.run(["scontrol", "show", "nodes", "-o"]).splitlines():
        if not line.strip() or line.startswith("No nodes"):
            continue
        f = parse_node_line(line)
        name = f.get("NodeName")
        if not name:
            continue
        gpu_type, gpus = parse_gpu_gres(f.get("Gres", ""), name)
        rack, block = where.get(name, (None, None))
        nodes.append(DiscoveredNode(name=name, gpu_label=gpu_type, gpus=gpus, cpus=_int(f.get("CPUTot")),
                                    mem_mib=_int(f.get("RealMemory")), rack=rack, block=block,
                                    partitions=_names(f.get("Partitions")),  # residency (docs/residency.md)
                                    features=_names(f.get("AvailableFeatures") or f.get("Features"))))
    return nodes


def _names(text: str | None) -> tuple[str, ...]:
    """A Slurm comma list (``(null)`` and empty: none)."""
    if not text or text in ("(null)", "N/A"):
        return ()
    return tuple(sorted({t.strip() for t in text.split(",") if t.strip()}))


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _sacctmgr(commands: SlurmCommands, *args: str) -> Iterable[list[str]]:
    for line in commands.run(["sacctmgr", "-n", "-P", "show", *args]).splitlines():
        if line.strip():
            yield line.split("|")


def slurm_accounts(commands: SlurmCommands) -> dict[str, float]:
    """Accounts (teams) with their fair-share value (1 where it is ``parent`` or unset); root left out."""
    shares: dict[str, float] = {}
    for account, user, fairshare in _sacctmgr(commands, "association", "format=Account,User,Fairshare"):
        if account == "root" or user:
            continue
        shares[account] = float(fairshare) if fairshare.replace(".", "", 1).isdigit() and float(fairshare) > 0 \
            else 1.0
    for (account,) in _sacctmgr(commands, "account", "format=Account"):
        if account != "root":
            shares.setdefault(account, 1.0)
    return shares


def slurm_qos(commands: SlurmCommands) -> list[PriorityClass]:
    """Every QoS with its priority."""
    return [PriorityClass(name, float(prio or 0)) for name, prio in _sacctmgr(commands, "qos", "format=Name,Priority")]
