"""Active-jobs signals of the issue 15 experiment (``benchmarks/active_jobs_experiment.py``): by hand
on tiny tables, and no job that has not ended at a submit time leaks its end or duration into it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.active_jobs_experiment import ENDED, PENDING, RUNNING, SIGNALS, active_signals


def job(job_id: str, submit: float, start: float, end: float, user: str = "u1", cpus: float = 4.0) -> dict:
    return {
        "job_id": job_id,
        "user": user,
        "submit_ts": submit,
        "start_ts": start,
        "end_ts": end,
        "duration_s": end - start,
        "cpus": cpus,
        "num_gpus": np.nan,
        "time_limit_s": np.nan,
    }


def signals_of(rows: list[dict], job_id: str) -> dict:
    table = pd.DataFrame(rows)
    sig = active_signals(table)
    return sig.iloc[int(np.flatnonzero(table["job_id"] == job_id)[0])].to_dict()


@pytest.mark.parametrize("end", [1000.0, 5000.0, np.nan], ids=["ends-1000", "ends-5000", "never-ends"])
def test_running_job_gives_only_its_elapsed_time(end: float) -> None:
    s = signals_of([job("a", 0.0, 10.0, end), job("b", 100.0, 200.0, 300.0)], "b")
    assert s["n_running"] == 1 and s["n_pending"] == 0
    assert s["recent_running_elapsed_s"] == 90.0 and s["longest_running_elapsed_s"] == 90.0
    assert s["think_s"] == 100.0 and s["prev_same_size"] == 1.0
    assert (s["prev_status"], s["prev_known_s"]) == (RUNNING, 90.0)
    assert (s["req_status"], s["req_known_s"], s["req_think_s"]) == (RUNNING, 90.0, 100.0)
    assert s["req_n_running"] == 1 and s["req_longest_running_elapsed_s"] == 90.0


def test_ended_and_pending_earlier_jobs() -> None:
    rows = [
        job("done", 0.0, 10.0, 50.0),
        job("waits", 60.0, 500.0, 900.0, cpus=8.0),
        job("q", 100.0, 600.0, 700.0),
    ]
    s = signals_of(rows, "q")
    assert s["n_running"] == 0 and s["n_pending"] == 1
    assert np.isnan(s["recent_running_elapsed_s"]) and np.isnan(s["longest_running_elapsed_s"])
    assert (s["think_s"], s["prev_same_size"], s["prev_status"], s["prev_known_s"]) == (
        40.0,
        0.0,
        PENDING,
        0.0,
    )
    # the latest same-size submission ended before the submit time: its duration is known
    assert (s["req_status"], s["req_known_s"], s["req_think_s"]) == (ENDED, 40.0, 100.0)
    assert s["req_n_running"] == 0


def test_first_job_other_users_and_same_second_submissions_are_invisible() -> None:
    rows = [
        job("other", 0.0, 0.0, 10_000.0, user="u2"),
        job("twin", 50.0, 50.0, 60.0),
        job("q", 50.0, 51.0, 70.0),
    ]
    for job_id in ("twin", "q"):
        s = signals_of(rows, job_id)
        assert s["n_running"] == 0 and s["n_pending"] == 0 and s["req_n_running"] == 0
        assert all(np.isnan(s[c]) for c in SIGNALS if c not in ("n_running", "n_pending", "req_n_running"))


def test_a_job_that_ends_at_the_submit_time_counts_as_running() -> None:
    """The history store's rule: ended means ``end_ts`` strictly before the submit time."""
    s = signals_of([job("a", 0.0, 10.0, 100.0), job("b", 100.0, 100.0, 200.0)], "b")
    assert (s["prev_status"], s["prev_known_s"], s["n_running"]) == (RUNNING, 90.0, 1)
    s = signals_of([job("a", 0.0, 10.0, 99.0), job("b", 100.0, 100.0, 200.0)], "b")
    assert (s["prev_status"], s["prev_known_s"], s["n_running"]) == (ENDED, 89.0, 0)


def test_no_leak_from_jobs_not_ended_at_submit_time() -> None:
    """Moving the end of every job that has not ended at ``t`` later changes nothing submitted at ``t``."""
    rng = np.random.default_rng(0)
    n = 60
    submit = np.sort(rng.integers(0, 2_000, n)).astype(float)
    start = submit + rng.integers(0, 300, n)
    end = start + rng.integers(1, 600, n)
    rows = [
        job(str(i), submit[i], start[i], end[i], user=f"u{i % 3}", cpus=float(rng.choice([1, 4])))
        for i in range(n)
    ]
    base = active_signals(pd.DataFrame(rows))
    for j in range(n):
        moved = pd.DataFrame(rows)
        late = moved["end_ts"].to_numpy() >= submit[j]
        moved.loc[late, "end_ts"] += rng.integers(1, 10_000, int(late.sum()))
        moved["duration_s"] = moved["end_ts"] - moved["start_ts"]
        pd.testing.assert_series_equal(active_signals(moved).iloc[j], base.iloc[j])
