"""The replay honours residency through the rules layer's one path (intake -> decide): every run of a
constrained job is on nodes its constraint allows, whatever the policy."""

import numpy as np
import pytest

from predictor.capacity.eligibility import node_mask
from predictor.capacity.inventory import Inventory, Node
from predictor.capacity.layout import ClusterLayout
from predictor.sim.predictions import OraclePredictions
from predictor.sim.progress import JobStatus
from predictor.sim.replay import SimConfig, replay
from predictor.sim.rules import PolicyRules, load_policy
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows

INV = Inventory(nodes=tuple(
    Node(f"{region}{i}", "A100-80GB", 8, nvlink_islands=(tuple(range(8)),), numa_of_gpu=(0,) * 4 + (1,) * 4,
         rack=region, region=region, features=("sensitive",) if (region, i) == ("eu", 0) else ())
    for region in ("eu", "us") for i in range(2)
))
LAY = ClusterLayout.of(INV)


class Watching(PolicyRules):
    """The real rules layer, noting where each run the replay carried out went."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.runs: list[tuple[int, tuple[str, ...]]] = []

    def job_started(self, j, decision) -> None:
        super().job_started(j, decision)
        self.runs.append((j, decision.placement.nodes))


@pytest.mark.parametrize("preset", ["ours", "fifo", "las", "kueue"])
def test_every_replayed_run_lands_where_its_constraint_allows(preset):
    rng = np.random.default_rng(7)
    rows = JobRows()
    texts = [None, "region=eu", "region=us", "label=sensitive", "region=mars"]
    for k in range(60):
        rows.add(f"j{k}", gpus=int(rng.choice([1, 2, 4, 8])), run=float(rng.uniform(50, 2000)),
                 submit=float(rng.uniform(0, 3000)), checkpoint=600.0, constraints=texts[k % len(texts)],
                 tier=str(rng.choice(["production", "research", "best_effort"])))
    table, _ = load_workload(rows.frame())
    preds = OraclePredictions().predict(table, INV)
    rules = Watching(preset, load_policy(preset), table, INV, preds)
    rec = replay(table, INV, rules, preds, SimConfig())
    assert rules.runs
    constraint = dict(zip(table.job_ids, table.frame["constraints"].tolist(), strict=True))
    for j, nodes in rules.runs:
        text = constraint[table.job_ids[j]]
        if isinstance(text, str):
            allowed = {LAY.node_names[i] for i in np.flatnonzero(node_mask(LAY, text))}
            assert set(nodes) <= allowed, (table.job_ids[j], text, nodes)
    status = dict(zip(table.job_ids, rec.status, strict=True))
    assert all(status[f"j{k}"] == JobStatus.REJECTED for k in range(4, 60, 5))  # region=mars: nowhere
    assert sum(s == JobStatus.DONE for s in status.values()) == 48


def test_replay_through_the_rules_counts_losses_per_checkpoint_kind():
    """Both kinds in one queue, decided by the real rules layer: a production job evicts an
    application job (loses its work since its last save) and a system-snapshot job (loses its write
    and restore), and report.json's counter says which lost what."""
    from predictor.capacity.inventory import homogeneous_inventory
    from predictor.sim.metrics import policy_metrics

    rows = (JobRows()
            .add("app", gpus=4, run=50_000, submit=0, checkpoint=600, checkpoint_kind="application", tier="best_effort")
            .add("criu", gpus=4, run=50_000, submit=0, checkpoint_kind="system", checkpoint_size_gb=10.0,
                 tier="best_effort")
            .add("prod", gpus=8, run=1000, submit=2000, tier="production"))
    inv = homogeneous_inventory(8)
    table, _ = load_workload(rows.frame())
    preds = OraclePredictions().predict(table, inv)
    rec = replay(table, inv, PolicyRules("ours", load_policy("ours"), table, inv, preds), preds, SimConfig())
    _, extra = policy_metrics(rec)
    lost = extra["preemption_lost_gpu_hours_by_checkpoint_kind"]
    assert extra["jobs_finished"] == 3 and int(rec.preemptions.sum()) == 2
    assert lost["application"] == pytest.approx(200 * 4 / 3600)  # evicted at 2000 s: 2000 mod 600 lost
    assert lost["system"] == pytest.approx(2 * 10 * 4 / 3600)  # 10 s to write, 10 s to restore
    assert lost["none"] == lost["unknown"] == 0.0
