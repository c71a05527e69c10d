import time

import pandas as pd
import pytest

from features.schema import COLUMNS
from predictor.adapters.slurm.state import (
    canonical_rows,
    canonical_state,
    expand_hostlist,
    jobs_from_squeue,
    parse_reservations,
    parse_slurm_time,
    slurm_time,
)

# Two jobs as Slurm 22.05's `squeue --json` prints them (fields trimmed to those read).
SQUEUE = {
    "meta": {"plugin": {"type": "openapi/v0.0.38"}},
    "errors": [],
    "jobs": [
        {"job_id": 41, "array_job_id": 0, "array_task_id": None, "job_state": "PENDING", "priority": 11075,
         "nice": None, "qos": "normal", "partition": "gpu", "account": "vision", "user_name": "ana",
         "time_limit": 60, "resv_name": "", "admin_comment": "", "restart_cnt": 0, "required_nodes": "",
         "tres_req_str": "cpu=8,mem=64G,node=1,billing=8,gres/gpu=2", "tres_per_node": "gres:gpu:2",
         "node_count": 1, "cpus": 8, "name": "llama-ft", "submit_time": 1795981014, "start_time": 1795990000,
         "deadline": 0, "state_reason": "Priority"},
        {"job_id": 42, "array_job_id": 40, "array_task_id": 3, "job_state": "RUNNING", "priority": 500,
         "nice": 4294967196, "qos": "high", "partition": "gpu", "account": "nlp", "user_name": "bo",
         "time_limit": 4294967295, "resv_name": "pred-42", "admin_comment": "x", "restart_cnt": 1,
         "required_nodes": "gpu[01-02]", "tres_req_str": "cpu=2,mem=4000M,node=2,gres/gpu:a100=16",
         "tres_per_node": "gres:gpu:a100:8", "node_count": 2, "cpus": 2, "name": "pretrain",
         "submit_time": 1795981000, "start_time": 1795981100, "deadline": 1796000000, "state_reason": "None"},
    ],
}


def test_jobs_are_indexed_with_array_tasks():
    jobs = jobs_from_squeue(SQUEUE)
    assert list(jobs) == ["41", "40_3"]
    a, b = jobs["41"], jobs["40_3"]
    assert (a.pending, a.priority, a.nice, a.time_limit_min) == (True, 11075, 0, 60)
    assert (b.running, b.nice, b.time_limit_min, b.restarts, b.reservation) == (True, -100, None, 1, "pred-42")


def test_canonical_rows():
    rows = canonical_rows(jobs_from_squeue(SQUEUE).values(), now=1795981400).set_index("job_id")
    assert set(COLUMNS) <= set(rows.columns) | {"job_id"}
    a, b = rows.loc["41"], rows.loc["40_3"]
    assert (a["num_gpus"], a["mem_mib"], a["time_limit_s"], a["state"]) == (2, 65536, 3600, "PENDING")
    assert pd.isna(a["gpu_type"])
    assert a["start_ts"] != a["start_ts"]  # a pending job's expected start is not a start (NaN)
    assert (b["num_gpus"], b["gpu_type"], b["num_nodes"], b["state"], b["duration_s"]) == (16, "a100", 2, "RUNNING", 300)
    assert b["time_limit_s"] != b["time_limit_s"] and b["deadline_ts"] == 1796000000  # INFINITE limit -> NaN
    assert (a["scheduler_priority"], a["pending_reason"], b["reservation"]) == (11075, "Priority", "pred-42")


def test_no_jobs_gives_an_empty_canonical_table():
    assert canonical_rows([]).empty


@pytest.mark.parametrize(
    ("state", "canonical"),
    [("PENDING", "PENDING"), ("COMPLETING", "RUNNING"), ("CANCELLED by 0", "CANCELLED"), ("DEADLINE", "TIMEOUT"),
     ("REQUEUE_HOLD", "PENDING"), ("OUT_OF_MEMORY", "OUT_OF_MEMORY"), ("BOOT_FAIL", "NODE_FAIL"),
     ("CONFIGURING", "RUNNING"), ("WEIRD", "WEIRD"), ("", None)],
)
def test_states(state, canonical):
    assert canonical_state(state) == canonical


def test_the_adapter_and_the_sacct_reader_read_states_alike():
    """One parser: every state the sacct reader knows maps the same way in the adapter."""
    import pyarrow as pa

    from features.sources.slurm_fields import SLURM_STATES, normalise_slurm_state

    words = [*SLURM_STATES, "CANCELLED by 1000", "CANCELLED+", "WEIRD", ""]
    vectorised = normalise_slurm_state(pa.array(words, pa.string())).to_pylist()
    assert [canonical_state(w) for w in words] == vectorised


@pytest.mark.parametrize(
    ("hosts", "names"),
    [("gpu[01-03,07],login1", ("gpu01", "gpu02", "gpu03", "gpu07", "login1")), ("localhost", ("localhost",)),
     ("", ()), ("n[8-10]-ib", ("n8-ib", "n9-ib", "n10-ib"))],
)
def test_expand_hostlist(hosts, names):
    assert expand_hostlist(hosts) == names


def test_reservations_parse_scontrol_one_liners():
    start = time.time() + 3600
    text = (f"ReservationName=pred-7 StartTime={slurm_time(start)} EndTime={slurm_time(start + 600)} "
            "Duration=00:10:00 Nodes=gpu[01-02] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) "
            "Flags=IGNORE_JOBS,SPEC_NODES TRES=cpu=4 Users=ana Groups=(null) Accounts=(null) Licenses=(null) "
            "State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n")
    r = parse_reservations(text)["pred-7"]
    assert r.nodes == "gpu[01-02]" and r.users == "ana" and r.accounts == "" and "IGNORE_JOBS" in r.flags
    assert abs(r.start_ts - start) <= 1 and abs(r.end_ts - start - 600) <= 1
    assert parse_reservations("No reservations in the system\n") == {}


def test_times_round_trip_through_slurm_format():
    assert parse_slurm_time(slurm_time(1795981014.2)) == 1795981015
    assert parse_slurm_time("Unknown") is None
