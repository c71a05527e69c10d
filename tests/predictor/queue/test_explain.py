"""``explain_job`` on small snapshots: each link of the chain says what the plan and the cluster say."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.capacity.inventory import Inventory, Node
from predictor.policy.presets import load_policy
from predictor.policy.scheduler import decide
from predictor.queue.explain import explain_job
from predictor.queue.start_estimate import estimate_starts
from tests.builders import SnapshotBuilder, make_job, make_running

NOW = 50_000.0


def _explain(inv, pending, running=(), job_id="w", usage=None):
    b = SnapshotBuilder(inv).pending(*pending).running(*running)
    if usage:
        b = b.usage(usage)
    snap = b.build(now=NOW)
    plan = decide(snap, load_policy(None))
    durations = [np.full(len(snap.running), 3600.0)] * 3
    return explain_job(plan, estimate_starts(plan, durations, what_if=True), job_id), plan


def _mixed() -> Inventory:
    return Inventory(nodes=(Node("a100-0", "A100-80GB", 8), Node("v100-0", "V100M32", 8)))


def test_a_request_for_a_busy_type_whose_memory_fits_another_is_told_to_accept_it() -> None:
    running = [make_running("big").gpus(8).types("A100-80GB").started(NOW - 60).ends(NOW + 7200).team("t1")]
    doc, _ = _explain(_mixed(), [make_job("w").gpus(4).types("A100-80GB").memory(12_000).predict(3600)
                                 .submitted(NOW - 10).team("t2")], running)
    ch = doc["chain"]
    assert ch["asks"]["gpu_types_requested"] == ["A100-80GB"] and ch["asks"]["memory_needed_mib"] < 32_768
    assert [t["gpu_type"] for t in ch["could_run_on"]["types"]] == ["A100-80GB"]
    assert ch["held_by"]["free_gpus_now"] == 0
    assert [h["job_id"] for h in ch["held_by"]["next_to_free"]] == ["big"]
    best = ch["what_if"]["best"]
    assert best is not None and "V100M32" in best["change"] and best["gain_s"] > 3000
    assert best["p50_start_ts"] == pytest.approx(NOW)
    assert any("Soonest change" in s for s in doc["summary"])


def test_jobs_ahead_are_shown_with_their_factors_beside_its_own() -> None:
    inv = Inventory(nodes=(Node("n0", "A100-80GB", 8),))
    running = [make_running("r").gpus(8).started(NOW - 60).ends(NOW + 3600).team("t1")]
    jobs = [make_job("prod").gpus(8).predict(600).tier("production").submitted(NOW - 100).team("t1"),
            make_job("w").gpus(8).predict(600).tier("best_effort").submitted(NOW - 200).team("t2")]
    doc, plan = _explain(inv, jobs, running)
    ahead = doc["chain"]["ahead"]
    assert ahead["rank"] == 2 and ahead["pending"] == 2 and ahead["ahead_on_its_gpu_types"] == 1
    [first] = ahead["just_ahead"]
    assert first["job_id"] == "prod" and first["priority"] > ahead["priority"]
    tier = {f["name"]: f for f in first["factors"]}["tier"]
    mine = {f["name"]: f for f in ahead["factors"]}["tier"]
    assert tier["value"] > mine["value"]
    est = doc["chain"]["start_estimate"]
    # "prod" takes the node when "r" ends; "w" follows it
    assert est["p50_ts"] == pytest.approx(NOW - 60 + 3600 + 600)
    assert doc["chain"]["decision"]["action"] == plan.decision_for("w").action


def test_a_gang_bigger_than_any_type_can_never_run_and_says_so() -> None:
    inv = Inventory(nodes=(Node("n0", "A100-80GB", 8),))
    doc, _ = _explain(inv, [make_job("w").gpus(16).predict(600).submitted(NOW)])
    assert doc["chain"]["could_run_on"]["can_ever_run"] is False
    assert doc["chain"]["start_estimate"]["p50_ts"] is None
    assert doc["summary"][0].startswith("It can never run here")
    # free GPUs, holders and rank do not bear on a job no type can hold: the summary does not count them
    assert not any("GPU(s) of its types are free" in line or line.startswith("Rank ") for line in doc["summary"])


def test_fair_share_limit_names_the_team_its_usage_and_share() -> None:
    inv = Inventory(nodes=(Node("n0", "A100-80GB", 8),))
    jobs = [make_job("w").gpus(8).predict(600).submitted(NOW).team("heavy"),
            make_job("x").gpus(8).predict(600).submitted(NOW).team("light")]
    doc, _ = _explain(inv, jobs, usage={"heavy": 9e6, "light": 1e6})
    fs = doc["chain"]["limits"]["fairshare"]
    assert fs["team"] == "heavy" and fs["usage_fraction"] == pytest.approx(0.9)
    assert fs["factor"] == pytest.approx(2 ** (-0.9 / fs["share_fraction"]))
    assert "fairshare" in fs["rule"]


def test_unknown_or_running_job_is_a_key_error() -> None:
    inv = Inventory(nodes=(Node("n0", "A100-80GB", 8),))
    with pytest.raises(KeyError):
        _explain(inv, [make_job("a").gpus(1).submitted(NOW)], job_id="nope")


def test_under_strict_fifo_per_queue_another_queue_is_offered() -> None:
    from predictor.policy.config import QueueingConfig

    inv = Inventory(nodes=(Node("n0", "A100-80GB", 8), Node("n1", "A100-80GB", 8)))
    running = [make_running("r").gpus(8).on("n0").started(NOW - 60).ends(NOW + 7200)]
    jobs = [make_job("head").gpus(16).predict(100).queue("busy").tier("production").submitted(NOW - 100),
            make_job("w").gpus(4).predict(5000).queue("busy").tier("best_effort").submitted(NOW - 50),
            make_job("other").gpus(1).predict(600).queue("quiet").tier("best_effort").submitted(NOW - 40)]
    snap = SnapshotBuilder(inv).pending(*jobs).running(*running).build(now=NOW)
    policy = load_policy(None).model_copy(update={"queueing": QueueingConfig(strategy="strict", scope="queue")})
    plan = decide(snap, policy)
    est = estimate_starts(plan, [np.full(1, 7200.0)] * 3, what_if=True)
    doc = explain_job(plan, est, "w")
    assert doc["chain"]["limits"]["strict_fifo"]["scope"] == "queue"
    moved = next(o for o in doc["chain"]["what_if"]["options"] if o["change"] == "submit to queue quiet")
    assert moved["gain_s"] > 3600  # behind the blocked head of "busy" it waits for it; in "quiet" it fits now
