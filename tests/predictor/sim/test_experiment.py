import pytest

from features.errors import InputError
from predictor.sim.experiment import POLICIES, ExperimentConfig, split_history
from tests.predictor.sim.sim_builders import JobRows


def _history():
    rows = JobRows()
    # submit at 0..90 s, each runs 15 s from its submit (end = submit + 15), except job 1 which runs long
    for i in range(10):
        rows.add(f"j{i}", submit=10.0 * i, run=15.0, start_ts=1_700_000_000.0 + 10 * i,
                 end_ts=1_700_000_000.0 + 10 * i + (500.0 if i == 1 else 15.0))
    return rows.frame()


def test_split_trains_only_on_prefix_jobs_that_ended_before_the_replay_starts():
    split = split_history(_history(), 0.3)
    assert split.split_ts == 1_700_000_030.0
    assert list(split.replayed["job_id"]) == [f"j{i}" for i in range(3, 10)]
    # j1 was still running at the split (ends at 510 s), j2 ends at 35 s > 30 s: neither trains
    assert list(split.train["job_id"]) == ["j0"]
    assert (split.train["end_ts"] < split.split_ts).all()


def test_a_trace_without_a_recorded_schedule_trains_on_prefix_jobs_that_would_have_ended_unwaited():
    """Scheduler-input traces (Philly-derived, Gavel) give run times but no start or end."""
    frame = _history()
    frame["start_ts"] = float("nan")
    frame["end_ts"] = float("nan")
    frame.loc[frame["job_id"] == "j1", "duration_s"] = 500.0
    split = split_history(frame, 0.3)
    # submit + run time before the split at 30 s: j0 (0 + 15); j1 (10 + 500) and j2 (20 + 15) not
    assert list(split.train["job_id"]) == ["j0"]


def test_zero_fraction_replays_everything_and_trains_on_nothing():
    split = split_history(_history(), 0.0)
    assert split.split_ts is None and len(split.replayed) == 10 and split.train.empty


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_fraction_outside_zero_one_is_an_input_error(fraction):
    with pytest.raises(InputError, match="train fraction"):
        ExperimentConfig(train_fraction=fraction)


def test_every_issue_policy_is_defined_and_oracles_are_labelled():
    assert set(POLICIES) == {"fifo", "sjf-oracle", "qssf", "qssf-sized", "las", "kueue", "ours",
                             "ours-oracle"}
    assert {n for n, s in POLICIES.items() if s.predictions == "oracle"} == {"sjf-oracle", "ours-oracle"}
