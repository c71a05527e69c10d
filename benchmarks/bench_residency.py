"""Benchmark of residency in the rules layer (docs/residency.md): what node eligibility costs ``decide()``.

The replay-sized cluster of ``bench_policy`` (125 nodes x 8 GPUs, 97% busy, ~300 running jobs) with
200 pending jobs, and its deep queue (5,000 pending), under ``ours`` with ``explain=False`` (what a
replay passes). The nodes are spread over 4 regions, one in 8 carries the tag ``sensitive``.
Reported, median CPU seconds of one ``decide()``: no job constrained; 30% of the jobs constrained
(``region=r0|r1``, ``region=r2``, ``label=sensitive``); and the same 30% plus a policy rule for one of
the 20 teams (``residency.teams``). Run with ``PYTHONPATH`` at a checkout without residency to get
its unconstrained figure (the other two are then skipped).

Prints one JSON document. Run: ``.venv/bin/python benchmarks/bench_residency.py [--quick]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
from bench_policy import build_snapshot, timed  # the script's own folder

from predictor.capacity.inventory import Inventory
from predictor.capacity.layout import ClusterLayout
from predictor.policy.presets import load_policy, policy_from_mapping
from predictor.policy.scheduler import decide
from predictor.policy.snapshot import ClusterSnapshot, PendingJobs

TEXTS = np.array(["region=r0|r1", "region=r2", "label=sensitive"], dtype=object)


def regional(snap: ClusterSnapshot) -> ClusterSnapshot:
    """The same snapshot on an inventory whose nodes carry regions and tags (same GPU indices)."""
    nodes = []
    for i, n in enumerate(snap.layout.inventory.nodes):
        try:
            n = dataclasses.replace(n, region=f"r{i % 4}", features=("sensitive",) if i % 8 == 0 else ())
        except TypeError:  # a checkout without residency attributes
            pass
        nodes.append(n)
    return dataclasses.replace(snap, layout=ClusterLayout.of(Inventory(nodes=tuple(nodes))), free_milli=None)


def constrained(snap: ClusterSnapshot, rng: np.random.Generator, share: float) -> ClusterSnapshot:
    p = snap.pending
    text = np.where(rng.random(len(p)) < share, TEXTS[rng.integers(0, len(TEXTS), len(p))], None).astype(object)
    pending = PendingJobs(**{**{f.name: getattr(p, f.name) for f in dataclasses.fields(p)}, "constraint": text})
    return dataclasses.replace(snap, pending=pending, free_milli=None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeat = 3 if args.quick else 7
    base = load_policy(preset="ours")
    has_residency = hasattr(base, "residency")
    team_rule = policy_from_mapping({**base.model_dump(), "residency": {"teams": {"team-03": "region=r3"}}}) \
        if has_residency else None
    out = {"policy": "ours", "explain": False, "repeat": repeat, "residency_code": has_residency, "scenarios": {}}
    for name, pending in (("replay-sized", 200), ("deep-queue", 5000)):
        rng = np.random.default_rng(3)
        snap = regional(build_snapshot(rng, n_nodes=125, n_running=600, n_pending=pending, busy=0.97))
        row = {"pending": pending, "running": len(snap.running)}
        row["none_cpu_s"] = timed(lambda s=snap: decide(s, base, explain=False), repeat)[1]
        if has_residency:
            some = constrained(snap, np.random.default_rng(4), 0.3)
            row["constrained_30pct_cpu_s"] = timed(lambda s=some: decide(s, base, explain=False), repeat)[1]
            row["constrained_30pct_plus_team_rule_cpu_s"] = timed(
                lambda s=some: decide(s, team_rule, explain=False), repeat)[1]
            plan = decide(some, base, explain=False)
            row["starts_constrained"] = int(sum(1 for d in plan.decisions if d.action == "start"))
        out["scenarios"][name] = row
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
