"""Point-in-time features: hand-checked statistics, no leakage (hypothesis), batch == serving."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.build import FEATURE_NAMES, JobFeatureBuilder, features_for, history_with
from features.errors import InputError
from features.history import HistoryStore, family_keys, history_state
from features.schema import conform


class JobBuilder:
    """Fluent builder for one canonical job row: ``make_job("a").user("u").ran(0, 10, 100)``."""

    def __init__(self, job_id: str) -> None:
        self.row: dict = {"job_id": job_id, "user": "u1", "team": "t1", "job_name": "train", "state": "COMPLETED",
                          "num_gpus": 1.0, "submit_ts": 0.0}

    def user(self, user: str, team: str = "t1") -> JobBuilder:
        self.row.update(user=user, team=team)
        return self

    def name(self, name: str) -> JobBuilder:
        self.row["job_name"] = name
        return self

    def ran(self, submit: float, wait: float, duration: float, state: str = "COMPLETED") -> JobBuilder:
        self.row.update(submit_ts=submit, start_ts=submit + wait, end_ts=submit + wait + duration,
                        duration_s=duration, state=state)
        return self

    def running(self, submit: float, wait: float, observed: float) -> JobBuilder:
        self.row.update(submit_ts=submit, start_ts=submit + wait, end_ts=None, duration_s=observed,
                        state="RUNNING", censored=True)
        return self

    def limit(self, seconds: float) -> JobBuilder:
        self.row["time_limit_s"] = seconds
        return self

    def gpus(self, n: float) -> JobBuilder:
        self.row["num_gpus"] = n
        return self


def make_job(job_id: str) -> JobBuilder:
    return JobBuilder(job_id)


def table(*builders: JobBuilder) -> pd.DataFrame:
    return conform(pd.DataFrame([b.row for b in builders]))


def features(jobs: pd.DataFrame, history=None, builder: JobFeatureBuilder | None = None) -> pd.DataFrame:
    builder = builder or JobFeatureBuilder(min_category_count=1).fit(jobs)
    return builder.transform(jobs, history)


@pytest.mark.parametrize(
    ("name", "stripped"),
    [
        ("train-llama-2024-05-01-run3", "train-llama-run"),
        ("eval_20240501T1200_seed7", "eval-seed"),
        ("Llama3.1-8B-SFT", "llama-b-sft"),
        ("bert.base.v2", "bert-base-v"),
        ("12345", "12345"),  # SWF executable ids stay whole
        ("run_001", "run"),
    ],
    ids=["date-and-run", "timestamp", "mixed-case", "version", "numeric", "counter"],
)
def test_family_key_strips_digits_and_dates(name: str, stripped: str) -> None:
    jobs = table(make_job("a").user("alice").name(name))
    assert family_keys(jobs)[0] == f"alice/{stripped}"


def test_family_keys_agree_between_small_and_large_batches() -> None:
    names = ["train-llama-2024-05-01-run3", "eval_20240501T1200_seed7", "bert.base.v2", "12345", "ÉTUDE-9", "--x--"]
    jobs = table(*[make_job(f"j{i}").user(f"u{i % 3}").name(names[i % len(names)]) for i in range(600)])
    large = family_keys(jobs)
    small = np.concatenate([family_keys(jobs.iloc[i : i + 100]) for i in range(0, 600, 100)])
    assert list(large) == list(small)


@pytest.mark.parametrize("n", [40, 600])  # plain Python and Arrow paths
def test_keys_of_a_column_view_are_those_of_its_frame(n: int) -> None:
    """A ``JobColumns`` view (what scoring passes) builds its keys from its own columns, as the frame's."""
    from features.job_keys import JobColumns, request_keys

    jobs = conform(pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n)], "user": [None if i % 7 == 0 else f"u{i % 5}" for i in range(n)],
        "job_name": [None if i % 4 == 0 else f"Train_{i % 3}-2024-05-0{1 + i % 9}" for i in range(n)],
        "time_limit_s": [float(600 * (1 + i % 4)) if i % 6 else np.nan for i in range(n)],
        "num_gpus": [float(1 + i % 8) for i in range(n)], "cpus": [float(4 * (i % 3)) for i in range(n)]}))
    view = JobColumns(jobs)
    assert list(family_keys(view)) == list(family_keys(jobs))
    assert list(request_keys(view)) == list(request_keys(jobs))
    assert family_keys(view) is family_keys(view)  # computed once per view


def test_ground_truth_family_column_is_not_a_key() -> None:
    """Requests scored by the service never carry the generator's family id: keys must not use it."""
    jobs = table(make_job("a").name("x1"), make_job("b").name("x2"))
    jobs["family"] = ["f-7", None]
    assert list(family_keys(jobs)) == ["u1/x", "u1/x"]


def test_history_statistics_by_hand() -> None:
    jobs = table(
        make_job("a").ran(0, 0, 100).limit(200),
        make_job("b").ran(10, 0, 200, "FAILED").limit(400),
        make_job("c").ran(20, 0, 400).limit(800),
        make_job("late").ran(415, 0, 50),  # ends at 465: after q's submit
        make_job("open").running(30, 0, 5000),  # never ended: never history
        make_job("q").ran(420, 0, 10).limit(1600),  # a, b, c ended at 100, 210, 420 -> c ends at submit: excluded
    )
    x = features(jobs).loc[5]
    logs = np.log([100.0, 200.0])
    assert x["user_n"] == 2
    assert x["user_mean_logd"] == pytest.approx(logs.mean(), rel=1e-6)
    assert x["user_last1_logd"] == pytest.approx(math.log(200), rel=1e-6)
    assert x["user_last2_logd"] == pytest.approx(logs.mean(), rel=1e-6)
    assert x["user_fail_rate"] == pytest.approx(0.5)
    assert x["user_mean_ratio"] == pytest.approx(math.log(0.5), rel=1e-6)
    assert x["user_limit_vs_last"] == pytest.approx(math.log(1600 / 400), rel=1e-6)
    assert x["user_log_gpu_hours_per_job"] == pytest.approx(math.log1p(300 / 3600 / 2), rel=1e-5)
    state = history_state(jobs)
    assert state.get("user", "last2_d")[5] == pytest.approx(150.0)
    assert features(jobs).loc[0, "user_n"] == 0 and np.isnan(features(jobs).loc[0, "user_mean_logd"])


def test_transform_rejects_rows_without_submit_time() -> None:
    jobs = table(make_job("a").ran(0, 0, 10))
    builder = JobFeatureBuilder().fit(jobs)
    with pytest.raises(InputError, match="lacks required column"):
        builder.transform(jobs.drop(columns=["submit_ts"]))
    jobs.loc[0, "submit_ts"] = np.nan
    with pytest.raises(InputError, match="job a: submit_ts"):
        builder.transform(jobs)


# --------------------------------------------------------------------------------------------
# properties

_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


@st.composite
def job_tables(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(min_value=2, max_value=18))
    rows = []
    for i in range(n):
        submit = float(draw(st.integers(0, 2000)))
        started = draw(st.booleans()) or i % 3 == 0
        wait = float(draw(st.integers(0, 300)))
        duration = float(draw(st.integers(0, 3000)))
        running = draw(st.integers(0, 9)) == 0
        b = make_job(f"j{i:02d}").user(draw(st.sampled_from(["u1", "u2", "u3"])), draw(st.sampled_from(["t1", "t2"])))
        b = b.name(draw(st.sampled_from(["train-7", "train-8", "eval", "42"])))
        b.gpus(float(draw(st.sampled_from([1, 2, 8]))))
        if draw(st.booleans()):
            b.row["peak_vram_mib"] = float(draw(st.integers(500, 80_000)))
        if draw(st.booleans()):
            b.limit(float(draw(st.integers(60, 5000))))
        if running:
            b.running(submit, wait, duration)
        elif started:
            b.ran(submit, wait, duration, draw(st.sampled_from(_STATES)))
        else:  # cancelled while pending: ended, no duration
            b.row.update(submit_ts=submit, end_ts=submit + wait, state="CANCELLED")
        rows.append(b)
    return table(*rows)


def _same(a: pd.Series | np.ndarray, b: pd.Series | np.ndarray) -> bool:
    return np.array_equal(np.asarray(a, dtype="float64"), np.asarray(b, dtype="float64"), equal_nan=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables(), target=st.integers(0, 100), mode=st.sampled_from(["remove", "change"]), seed=st.integers(0, 99))
def test_no_leakage_from_jobs_ending_after_submit(jobs: pd.DataFrame, target: int, mode: str, seed: int) -> None:
    """Removing or changing any job that ends after a job's submit time leaves its features unchanged."""
    i = target % len(jobs)
    builder = JobFeatureBuilder(min_category_count=1).fit(jobs)
    before = builder.transform(jobs).iloc[i]
    submit = jobs.loc[i, "submit_ts"]
    later = (jobs["end_ts"].isna() | (jobs["end_ts"] >= submit)) & (jobs.index != i)
    rng = np.random.default_rng(seed)
    if mode == "remove":
        mutated = jobs.loc[~later]
    else:
        mutated = jobs.copy()
        idx = mutated.index[later]
        mutated.loc[idx, "duration_s"] = rng.uniform(1, 1e5, len(idx))
        mutated.loc[idx, "end_ts"] = np.maximum(mutated.loc[idx, "end_ts"].fillna(submit), submit) + rng.uniform(0, 1e4, len(idx))
        mutated.loc[idx, "state"] = "FAILED"
        mutated.loc[idx, "num_gpus"] = 64.0
        mutated.loc[idx, "time_limit_s"] = 7.0
        mutated.loc[idx, "peak_vram_mib"] = 1e6
        mutated.loc[idx, "censored"] = False
    after = builder.transform(mutated).loc[i]
    assert _same(before.to_numpy(), after.to_numpy())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables())
def test_batch_and_one_job_paths_agree(jobs: pd.DataFrame) -> None:
    """The serving path (a store holding the jobs ended before submit) gives the batch row exactly."""
    builder = JobFeatureBuilder(min_category_count=1).fit(jobs)
    batch = builder.transform(jobs)
    for i in range(len(jobs)):
        ended_before = jobs.loc[jobs["end_ts"] < jobs.loc[i, "submit_ts"]]
        store = HistoryStore(ended_before.iloc[::-1])  # insertion order must not matter
        one = builder.transform(jobs.iloc[[i]], store)
        assert _same(batch.iloc[i].to_numpy(), one.iloc[0].to_numpy()), f"job {i}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables(), chunk=st.integers(1, 5))
def test_incremental_store_equals_store_built_at_once(jobs: pd.DataFrame, chunk: int) -> None:
    builder = JobFeatureBuilder(min_category_count=1).fit(jobs)
    ordered = jobs.sort_values(["end_ts", "job_id"])
    grown = HistoryStore()
    grown.state_for(jobs.iloc[:1])  # build the per-key state first, so add() updates it in place
    for k in range(0, len(ordered), chunk):
        grown.add(ordered.iloc[k : k + chunk])
    at_once = HistoryStore(jobs)
    query = jobs.assign(submit_ts=1e9)
    assert _same(builder.transform(query, grown).to_numpy(), builder.transform(query, at_once).to_numpy())
    assert _same(builder.transform(query, at_once).to_numpy(), builder.transform(query).to_numpy())


def test_store_survives_pickling_and_skips_duplicates() -> None:
    jobs = table(make_job("a").ran(0, 0, 100), make_job("b").ran(5, 0, 300), make_job("q").ran(1000, 0, 1))
    store = HistoryStore(jobs.iloc[:2])
    assert store.add(jobs.iloc[:2]) == 0 and len(store) == 2
    restored = pickle.loads(pickle.dumps(store))
    q = jobs.iloc[[2]]
    assert _same(features_for(q, store).to_numpy(), features_for(q, restored).to_numpy())


def test_history_with_prefers_the_new_table_over_the_snapshot() -> None:
    old = table(make_job("a").ran(0, 0, 100))
    new = table(make_job("a").ran(0, 0, 900), make_job("q").ran(2000, 0, 1))
    events = history_with(HistoryStore(old), new)
    assert len(events) == 2 and events.set_index("job_id").loc["a", "duration_s"] == 900


def test_feature_names_match_columns() -> None:
    jobs = table(make_job("a").ran(0, 0, 100))
    assert tuple(features(jobs).columns) == FEATURE_NAMES
