import numpy as np
import pytest

from predictor.capacity.inventory import homogeneous_inventory
from predictor.sim.metrics import (
    METRIC_KEYS,
    MetricsConfig,
    jain_index,
    part_metrics,
    policy_metrics,
    water_fill,
    window_integrals,
)
from predictor.sim.predictions import NoPredictions
from predictor.sim.replay import replay
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows, ScriptedRules, decision, on


@pytest.mark.parametrize(
    ("x", "expected"),
    [([1, 1, 1], 1.0), ([1, 0], 0.5), ([2, 1], 0.9), ([5], 1.0), ([], 1.0), ([0, 0], 1.0)],
)
def test_jain_index(x, expected):
    assert jain_index(np.array(x, dtype=float)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("capacity", "caps", "weights", "expected"),
    [
        (10, [2, 10, 10], [1, 1, 1], [2, 4, 4]),
        (10, [2, 10, 10], [1, 1, 2], [2, 8 / 3, 16 / 3]),
        (10, [1, 2, 3], [1, 1, 1], [1, 2, 3]),  # under-subscribed: everyone gets its demand
        (10, [0, 20], [1, 1], [0, 10]),
    ],
)
def test_water_fill(capacity, caps, weights, expected):
    out = water_fill(capacity, np.array(caps, float), np.array(weights, float))
    assert out == pytest.approx(expected)
    assert out.sum() <= capacity + 1e-9


def test_window_integrals_split_intervals_across_windows():
    edges = np.array([0.0, 60.0, 120.0, 180.0])
    out = window_integrals(np.array([0.0, 100.0]), np.array([90.0, 130.0]), np.array([2.0, 1.0]),
                           np.array([0, 1]), 2, edges)
    assert out.tolist() == [[120.0, 60.0, 0.0], [0.0, 20.0, 10.0]]


def _fifo_two_teams():
    # team a: two 8-GPU jobs of 100 s at t=0; team b: one at t=1. Run strictly in submit order.
    rows = JobRows().add("a1", gpus=8, team="a").add("a2", gpus=8, team="a").add("b1", gpus=8, team="b", submit=1,
                                                                                  deadline=250)
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(8)
    n = "node-0000"
    script = {0.0: [decision("a1", "start", on(n, 8))], 100.0: [decision("a2", "start", on(n, 8))],
              200.0: [decision("b1", "start", on(n, 8))]}
    rules = ScriptedRules(lambda view: script.get(view.now, []))
    return replay(table, inv, rules, NoPredictions().predict(table, inv))


def test_metric_set_matches_the_hand_calculation():
    rec = _fifo_two_teams()
    metrics, extra = policy_metrics(rec, MetricsConfig(starvation_s=150.0, fairness_window_s=300.0))
    assert tuple(metrics) == METRIC_KEYS
    assert metrics["avg_jct_s"] == pytest.approx((100 + 200 + 299) / 3)
    assert metrics["median_jct_s"] == 200.0
    assert metrics["p95_jct_s"] == pytest.approx(np.percentile([100, 200, 299], 95))
    assert metrics["avg_wait_s"] == pytest.approx((0 + 100 + 199) / 3)
    assert metrics["max_wait_s"] == 199.0
    assert metrics["starved_jobs"] == 1  # only b1 waited over 150 s
    assert metrics["sla_misses"] == 1  # b1 ended at 300 > deadline 250
    assert metrics["makespan_s"] == 300.0 and metrics["utilization"] == pytest.approx(1.0)
    # one 300 s window: demand a = 800 + 1600, b = 8 * 299; capacity 2400 -> entitled 1200 each;
    # received a = 1600, b = 800 -> x = (4/3, 2/3) -> Jain = 4 / (2 * (16/9 + 4/9)) = 0.9
    assert metrics["jain_index"] == pytest.approx(0.9)
    assert extra["jain_windows"] == 1
    assert extra["per_team"]["a"]["share"] == pytest.approx(2 / 3)
    assert extra["per_team"]["b"]["entitled_share"] == pytest.approx(0.5)


def test_short_windows_see_the_unfairness_a_long_window_averages_away():
    rec = _fifo_two_teams()
    # 100 s windows: in [0,100) and [100,200) both teams have demand, capacity 800 -> 400 each, but
    # a gets 800 and b nothing: x = (2, 0), Jain 0.5. In [200,300) only b has demand: not counted.
    metrics, extra = policy_metrics(rec, MetricsConfig(fairness_window_s=100.0))
    assert extra["jain_windows"] == 2
    assert metrics["jain_index"] == pytest.approx(0.5)


def test_part_metrics_judge_each_part_of_the_window_in_the_replay_of_all_of_it():
    rec = _fifo_two_teams()
    first, second = part_metrics(rec, 2, MetricsConfig(starvation_s=150.0, fairness_window_s=300.0))
    # jobs by submit order: [a1, a2] and [b1]; each part's jobs keep the times the whole replay gave them
    assert tuple(first) == METRIC_KEYS
    assert first["avg_jct_s"] == pytest.approx(150.0) and first["max_wait_s"] == 100.0
    assert first["sla_misses"] == 0 and first["starved_jobs"] == 0
    assert second["avg_jct_s"] == 299.0 and second["max_wait_s"] == 199.0 and second["sla_misses"] == 1
    # one team per part: no window with two teams to compare
    assert first["jain_index"] == 1.0 and second["jain_index"] == 1.0
    part = rec.restricted(np.array([2]))
    assert part.jobs.job_ids.tolist() == ["b1"] and part.seg_job.tolist() == [0]
    assert part.jobs.teams == rec.jobs.teams and part.seg_start.tolist() == [200.0]


def test_the_whole_window_is_the_sum_of_its_parts():
    from features.synth import generate
    from predictor.sim.experiment import POLICIES, replay_each
    from predictor.sim.predictions import OraclePredictions
    from predictor.sim.progress import ENDED
    from predictor.sim.replay import SimConfig
    from predictor.sim.rules import load_policy

    table, _ = load_workload(generate(300, seed=3, cluster_gpus=32, target_load=1.1))
    inv = homogeneous_inventory(32)
    rec = replay_each(table, inv, [("qssf", load_policy(POLICIES["qssf"].preset),
                                    OraclePredictions().predict(table, inv))], SimConfig())[0]
    whole, _ = policy_metrics(rec)
    parts = part_metrics(rec, 3)
    assert whole["max_wait_s"] == max(p["max_wait_s"] for p in parts)
    assert whole["sla_misses"] == sum(p["sla_misses"] for p in parts)
    assert whole["preemptions"] == sum(p["preemptions"] for p in parts)
    ended = [int(np.isin(rec.restricted(r).status, ENDED).sum()) for r in np.array_split(np.arange(len(table)), 3)]
    assert sum(ended) > 100  # the mean below is over a good part of the jobs
    assert whole["avg_jct_s"] == pytest.approx(np.dot(ended, [p["avg_jct_s"] for p in parts]) / sum(ended))
