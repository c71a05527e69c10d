"""sacct reader: the hand-written ``tests/fixtures/sacct/edge_cases.txt`` (written from sacct's
``-P`` output format, see tests/fixtures/README.md), generated exports, and the real NREL Eagle
sample (its CSV variant)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.sources import read_chunks
from features.sources.slurm_fields import format_slurm_duration

from .conftest import FIXTURES, ingest_into


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


NAN = math.nan
# job_id: state, num_gpus, gpu_type, num_nodes, cpus, mem_mib, time_limit_s, start, end, duration_s, censored, peak
EXPECTED = {
    "1001": ("COMPLETED", 8, "a100", 2, 64, 512 * 1024, 86400, "2024-03-01T10:05:00", "2024-03-01T12:05:00", 7200,
             False, 160000 / 4),
    "1002": ("CANCELLED", 1, None, 1, 4, 32 * 1024, 4 * 3600, None, "2024-03-01T11:30:00", NAN, False, NAN),
    "1003": ("RUNNING", 4, "H100-80GB", 1, 32, 256 * 1024, 2 * 86400, "2024-03-02T08:00:30", None, 26 * 3600, True, NAN),
    "1004": ("PENDING", 0, None, 1, 2, 8000, NAN, None, None, NAN, True, NAN),
    "1005": ("OUT_OF_MEMORY", 1, None, 1, 8, 64 * 1024, NAN, "2024-03-02T10:01:00", "2024-03-02T10:11:00", 600, False,
             81000),
    "1006": ("TIMEOUT", 2, "V100", 1, 4, 16 * 1024, 1800, "2024-03-02T11:00:00", "2024-03-02T11:30:05", 1805, False, NAN),
    "2000_1": ("COMPLETED", 1, None, 1, 1, 10 * 1024, 7200, "2024-03-03T00:00:10", "2024-03-03T01:00:10", 3600, False,
               12000),
    "2000_2": ("COMPLETED", 1, None, 1, 1, 10 * 1024, 7200, "2024-03-03T00:00:12", "2024-03-03T01:10:12", 4200, False,
               13000),
    "2000_[3-5]": ("PENDING", 1, None, 1, 1, 10 * 1024, 7200, None, None, NAN, True, NAN),
    "3000": ("COMPLETED", 4, "a100", 2, 20, 144 * 1024, 3 * 3600, "2024-03-04T00:01:00", "2024-03-04T02:01:00", 7200,
             False, 30000),
    "7004": ("NODE_FAIL", 0, None, 1, 1, NAN, 3 * 3600, "2024-03-07T10:00:00", "2024-03-07T10:20:00", 1200, False, NAN),
}
FIELDS = ("state", "num_gpus", "gpu_type", "num_nodes", "cpus", "mem_mib", "time_limit_s", "start_ts", "end_ts",
          "duration_s", "censored", "peak_vram_mib")

REJECTED = {
    "6000": "unparseable Submit time",
    "4000": "job steps without their job line just above them",
    "5000": "malformed sacct line: expected 17 fields, found 3",
    "7000": "start before submit",
    "7001": "end before start",
    "7002": "completed without a start time",
    "7003": "unknown state",
    "7004": "duplicate job_id",  # sacct --duplicates: the requeued run repeats the id
    "7005": "non-positive time_limit_s",
    "7006": "missing state",
}


def _same(got, want) -> bool:
    if want is None:
        return pd.isna(got)
    if isinstance(want, float) and math.isnan(want):
        return pd.isna(got)
    return got == want


@pytest.fixture(scope="module")
def edge_cases(tmp_path_factory):
    return ingest_into(tmp_path_factory.mktemp("sacct"), "sacct", [FIXTURES / "sacct/edge_cases.txt"])


@pytest.mark.parametrize("job_id", list(EXPECTED))
def test_fixture_jobs(edge_cases, job_id):
    row = edge_cases.job(job_id)
    want = dict(zip(FIELDS, EXPECTED[job_id], strict=True))
    for col in ("start_ts", "end_ts"):
        want[col] = ts(want[col]) if want[col] else None
    for col, value in want.items():
        assert _same(row[col], value), f"{job_id}.{col}: got {row[col]!r}, want {value!r}"
    assert row["source"] == "sacct"


@pytest.mark.parametrize("job_id", list(REJECTED))
def test_fixture_rejects(edge_cases, job_id):
    assert edge_cases.reason(job_id) == REJECTED[job_id]


def test_missing_job_id_rejected(edge_cases):
    assert list(edge_cases.rejects.loc[edge_cases.rejects["job_id"].isna(), "reject_reason"]) == ["missing job_id"]


def test_ids_team_queue_tier(edge_cases):
    row = edge_cases.job("1001")
    assert (row["user"], row["team"], row["queue"], row["tier"], row["job_name"]) == (
        "alice", "ml-team", "gpu", "normal", "train-llama")
    assert row["submit_ts"] == ts("2024-03-01T10:00:00")


@pytest.mark.parametrize("chunk_rows", [1, 3, 8])
def test_chunk_boundaries_do_not_change_the_result(run_ingest, fixture_file, edge_cases, chunk_rows):
    small = run_ingest("sacct", [fixture_file("sacct/edge_cases.txt")], chunk_rows=chunk_rows)
    cols = ["state", "num_gpus", "cpus", "mem_mib", "start_ts", "end_ts", "duration_s", "peak_vram_mib"]
    pd.testing.assert_frame_equal(small.jobs.sort_index()[cols], edge_cases.jobs.sort_index()[cols])
    assert sorted(small.rejects["reject_reason"]) == sorted(edge_cases.rejects["reject_reason"])


def test_parsable_with_trailing_pipe(run_ingest, fixture_file, edge_cases, tmp_path):
    text = fixture_file("sacct/edge_cases.txt").read_text()
    trailing = tmp_path / "sacct-p.txt"
    trailing.write_text("".join(line + "|\n" for line in text.splitlines()))
    got = run_ingest("sacct", [trailing])
    assert set(got.jobs.index) == set(edge_cases.jobs.index)
    assert got.job("1001")["peak_vram_mib"] == 40000


def test_timezone_shifts_wall_clock(run_ingest, fixture_file):
    berlin = run_ingest("sacct", [fixture_file("sacct/edge_cases.txt")], timezone="Europe/Berlin")
    assert berlin.job("1001")["submit_ts"] == ts("2024-03-01T10:00:00") - 3600  # CET = UTC+1


def test_header_without_required_columns(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("JobID|JobName\n1|x\n")
    from features.errors import InputError

    with pytest.raises(InputError, match=r"missing column\(s\) User, Submit, State"):
        list(read_chunks("sacct", [bad]))


# --- generated exports: rows -> sacct -P text -> reader -> the same values ------------------------

STATES = ["COMPLETED", "FAILED", "CANCELLED by 0", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"]

job_strategy = st.fixed_dictionaries({
    "gpus": st.integers(0, 16),
    "gpu_type": st.sampled_from([None, "a100", "h100"]),
    "nodes": st.integers(1, 4),
    "cpus": st.integers(1, 256),
    "mem_gib": st.integers(1, 2048),
    "wait": st.integers(0, 86400),
    "run": st.integers(0, 10 * 86400),
    "limit": st.integers(60, 14 * 86400),
    "state": st.sampled_from(STATES),
    "gpumem_mib": st.one_of(st.none(), st.integers(1, 81920)),
    "array": st.booleans(),
})


def _render(jobs: list[dict]) -> str:
    lines = ["JobID|JobName|User|Account|Partition|QOS|Submit|Start|End|Elapsed|Timelimit|State|ReqTRES|AllocTRES"
             "|NNodes|NTasks|TRESUsageInMax"]
    for i, job in enumerate(jobs):
        jid = f"{900 + i}_{i}" if job["array"] else str(1000 + i)
        submit = 1_700_000_000 + 3600 * i
        start, end = submit + job["wait"], submit + job["wait"] + job["run"]
        fmt = lambda t: datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731
        gpu = ""
        if job["gpus"]:
            gpu = (f"gres/gpu:{job['gpu_type']}={job['gpus']}," if job["gpu_type"] else "") + f"gres/gpu={job['gpus']},"
        tres = f"billing={job['cpus']},cpu={job['cpus']},{gpu}mem={job['mem_gib']}G,node={job['nodes']}"
        lines.append(f"{jid}|job{i}|user{i % 3}|acct{i % 2}|gpu|normal|{fmt(submit)}|{fmt(start)}|{fmt(end)}|"
                     f"{format_slurm_duration(job['run'])}|{format_slurm_duration(job['limit'])}|{job['state']}|"
                     f"{tres}|{tres}|{job['nodes']}||")
        lines.append(f"{jid}.batch|batch||acct{i % 2}|||{fmt(start)}|{fmt(start)}|{fmt(end)}|"
                     f"{format_slurm_duration(job['run'])}||COMPLETED||cpu=1,node=1|1|1|cpu=00:00:01,mem=10M")
        if job["gpumem_mib"] is not None and job["gpus"]:
            lines.append(f"{jid}.0|python||acct{i % 2}|||{fmt(start)}|{fmt(start)}|{fmt(end)}|00:00:01||COMPLETED||"
                         f"{tres}|{job['nodes']}|{job['nodes']}|gres/gpumem={job['gpumem_mib']}M,mem=1G")
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job_strategy, min_size=1, max_size=12), chunk_rows=st.integers(1, 7))
def test_generated_exports_read_back(tmp_path, jobs, chunk_rows):
    path = tmp_path / "gen.txt"
    path.write_text(_render(jobs))
    got = pd.concat(list(read_chunks("sacct", [path], chunk_rows=chunk_rows)), ignore_index=True)
    assert got["reader_reject_reason"].isna().all()
    got = got.set_index("job_id")
    assert len(got) == len(jobs)
    for i, job in enumerate(jobs):
        row = got.loc[f"{900 + i}_{i}" if job["array"] else str(1000 + i)]
        submit = 1_700_000_000 + 3600 * i
        assert row["submit_ts"] == submit and row["start_ts"] == submit + job["wait"]
        assert row["end_ts"] == submit + job["wait"] + job["run"]
        assert row["time_limit_s"] == job["limit"]
        assert (row["num_gpus"], row["cpus"], row["num_nodes"]) == (job["gpus"], job["cpus"], job["nodes"])
        assert row["mem_mib"] == job["mem_gib"] * 1024
        assert _same(row["gpu_type"], job["gpu_type"] if job["gpus"] else None)  # the reader's raw name
        want_state = job["state"].split()[0]
        assert row["state"] == want_state
        if job["gpumem_mib"] is not None and job["gpus"]:
            per_task = max(job["gpus"] / job["nodes"], 1)
            assert row["peak_vram_mib"] == pytest.approx(job["gpumem_mib"] / per_task)
        else:
            assert pd.isna(row["peak_vram_mib"])


# --- the real Eagle sample (CSV variant) ------------------------------------------------------------


@pytest.mark.shared_data
def test_eagle_sample(run_ingest, shared_file):
    got = run_ingest("sacct", [shared_file("eagle-sample/sample_eagle_data.csv")])
    assert got.summary.rows_read == 1000 and got.summary.rows_kept == 1000
    # 452 rows share job 532939: an array whose task index the export dropped
    tasks = got.jobs[got.jobs["job_id"].str.startswith("532939")]
    assert len(tasks) == 452 and "532939" in tasks.index and "532939_451" in tasks.index
    first = got.job("532209")
    assert first["submit_ts"] == ts("2019-01-01T08:55:55")
    assert first["duration_s"] == 99825.0 and first["time_limit_s"] == 172800.0
    assert (first["num_nodes"], first["cpus"], first["num_gpus"]) == (10, 10, 0)
    assert pd.isna(first["mem_mib"])  # mem_req 0 means "not requested"
    assert set(got.jobs["state"]) == {"COMPLETED", "TIMEOUT"}
    assert got.summary.gpu_jobs == 4 and got.summary.users == 15
    assert (got.jobs["duration_s"] >= 0).all() and not got.jobs["censored"].any()
