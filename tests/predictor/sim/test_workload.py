import numpy as np
import pandas as pd
import pytest

from features.errors import InputError
from features.schema import PLACEMENT_CLASSES
from predictor.sim.workload import DEFAULT_SLOWDOWN_BY_CLASS, load_workload
from tests.predictor.sim.sim_builders import JobRows


def test_rows_are_sorted_by_submit_and_times_start_at_zero():
    frame = JobRows().add("late", submit=50).add("early", submit=10).frame()
    table, truth = load_workload(frame)
    assert list(table.job_ids) == ["early", "late"]
    assert table.submit_s.tolist() == [0.0, 40.0]
    assert table.origin_ts == 1_700_000_010.0
    assert not truth


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"gpus": 0}, "no GPU requested (CPU-only job)"),
        ({"run": None}, "run time unknown (never started)"),
        ({"run": 0.0}, "non-positive run time"),
    ],
    ids=["cpu-only", "never-started", "zero-run"],
)
def test_unreplayable_rows_are_set_aside_with_a_reason(row, reason):
    frame = JobRows().add("ok").add("bad", **row).frame()
    table, _ = load_workload(frame)
    assert list(table.job_ids) == ["ok"]
    assert table.skipped.counts() == {reason: 1}


def test_empty_or_all_skipped_input_is_an_input_error():
    with pytest.raises(InputError, match="empty"):
        load_workload(JobRows().frame())
    with pytest.raises(InputError, match="no replayable job.*CPU-only"):
        load_workload(JobRows().add("a", gpus=0).frame())


def test_fractional_share_only_for_single_gpu_jobs_and_whole_gpus_by_default():
    frame = JobRows().add("half", gpus=1, milli=460).add("gang", gpus=4, milli=500).add("whole", gpus=2).frame()
    table, _ = load_workload(frame)
    assert table.gpu_milli.tolist() == [460, 1000, 1000]
    assert table.milli_demand.tolist() == [460, 4000, 2000]


def test_assumed_slowdowns_apply_to_gangs_only_and_ground_truth_wins():
    frame = JobRows().add("one", gpus=1).add("gang", gpus=8).frame()
    table, truth = load_workload(frame)
    assert not truth
    assert table.slowdown[0].tolist() == [1.0] * 5
    assert table.slowdown[1].tolist() == [DEFAULT_SLOWDOWN_BY_CLASS[c] for c in PLACEMENT_CLASSES]

    truth_cols = {f"true_slowdown_{c}": v for c, v in zip(PLACEMENT_CLASSES, [1.0, 1.3, 1.2, 2.0, 3.0], strict=True)}
    rows = JobRows()
    rows.add("ran", gpus=8, run=260.0, placement_class="cross_rack", true_duration_s=80.0, **truth_cols)
    rows.add("oom", gpus=8, run=30.0, state="OUT_OF_MEMORY", true_duration_s=80.0, **truth_cols)
    rows.add("queued", gpus=8, run=None, state="PENDING", true_duration_s=80.0, **truth_cols)
    table, truth = load_workload(rows.frame())
    assert truth
    # the observed run on its placement, corrected by that placement's true slowdown; the truth
    # where the log does not show the job's full run
    assert dict(zip(table.job_ids, table.work_s, strict=True)) == pytest.approx({"ran": 260.0 / 3.0, "oom": 80.0,
                                                                                 "queued": 80.0})
    # a class can never be faster than a better one: made monotone
    assert table.slowdown[0].tolist() == [1.0, 1.3, 1.3, 2.0, 3.0]


def test_observed_duration_on_a_known_placement_is_turned_into_best_placement_work():
    frame = JobRows().add("gang", gpus=8, run=140.0, placement_class="cross_rack").frame()
    table, _ = load_workload(frame)
    assert table.work_s[0] == pytest.approx(140.0 / DEFAULT_SLOWDOWN_BY_CLASS["cross_rack"])


def test_teams_are_coded_and_missing_team_is_named():
    frame = JobRows().add("a", team="b").add("b", team=None).add("c", team="a").frame()
    table, _ = load_workload(frame)
    assert table.teams == ("(no team)", "a", "b")
    assert [table.teams[c] for c in table.team_code] == ["b", "(no team)", "a"]
    assert np.isnan(table.deadline_s).all()


def test_requests_are_named_as_the_replayed_inventory_names_them():
    from pathlib import Path

    from predictor.capacity.inventory_sources import load_inventory
    from predictor.sim.workload import requests_on_inventory

    inventory = load_inventory(Path(__file__).resolve().parents[3] / "data/inventory/example-cluster.yaml")
    frame = pd.DataFrame({"job_id": ["a", "b", "c", "d", "e"],
                          "gpu_type": ["a10", "NVIDIA-A100-SXM4-80GB", "A10|H100-80GB", "V100", None]})
    out, any_type = requests_on_inventory(frame, inventory)
    assert out["gpu_type"].tolist()[:4] == ["A10", "A100-80GB", "A10", pd.NA] and pd.isna(out["gpu_type"].iloc[4])
    assert any_type == {"V100": 1}


def test_a_multi_type_request_is_limited_to_its_types_in_the_replay():
    """The service limited "A10|A100-80GB" to those types while the replay let it run anywhere."""
    from pathlib import Path

    from predictor.capacity.inventory_sources import load_inventory
    from predictor.sim.predictions import NoPredictions
    from predictor.sim.replay import replay
    from predictor.sim.rules import PolicyRules, load_policy
    from tests.predictor.sim.sim_builders import JobRows

    class Watched(PolicyRules):
        types: list = []

        def job_started(self, j, decision):
            self.types.append(decision.placement.gpu_type)
            super().job_started(j, decision)

    inventory = load_inventory(Path(__file__).resolve().parents[3] / "data/inventory/example-cluster.yaml")
    rows = JobRows()
    for k in range(12):  # more 4-GPU jobs at once than the A10 and A100 nodes hold: the L40S nodes stay empty
        rows.add(f"j{k}", gpus=4, run=100, submit=k, gpu_type="a10|NVIDIA-A100-SXM4-80GB")
    table, _ = load_workload(rows.frame())
    preds = NoPredictions().predict(table, inventory)
    rules = Watched("fifo", load_policy("fifo"), table, inventory, preds)
    rec = replay(table, inventory, rules, preds)
    assert np.isfinite(rec.end).all() and len(rules.types) == 12
    assert set(rules.types) <= {"A10", "A100-80GB"}
