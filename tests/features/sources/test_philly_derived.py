"""philly-derived reader on the real Chronus and Gavel artifacts in shared data, plus tiny inline
cases for the parts the artifacts do not exercise."""

from __future__ import annotations

import pytest

from features.sources import TRACE_EPOCH_TS

from .conftest import ingest_into


@pytest.mark.shared_data
def test_chronus_trace(tmp_path, shared_file):
    got = ingest_into(tmp_path, "philly-derived", [shared_file("philly-derived/trace_job_Philly_MIX1.csv")])
    assert got.summary.rows_read == got.summary.rows_kept == 30940
    first = got.job("0")  # 0,vc_6214e9,1,8555,5049,vgg16,747,14,1105,10,0,strict
    assert (first["team"], first["num_gpus"], first["job_name"], first["tier"]) == ("6214e9", 1, "vgg16", "sla")
    assert first["submit_ts"] == TRACE_EPOCH_TS + 8555 and first["duration_s"] == 747
    assert first["deadline_ts"] == first["submit_ts"] + 1105 and first["iterations"] == 5049
    best = got.job("2")  # best effort: no deadline
    assert best["tier"] == "best_effort" and best["deadline_ts"] != best["deadline_ts"]
    assert (got.jobs["state"] == "COMPLETED").all() and not got.jobs["censored"].any()
    assert got.summary.teams == 11


@pytest.mark.shared_data
def test_gavel_traces(tmp_path, shared_file):
    folder = shared_file("philly-derived/gavel-seed0")
    traces = sorted(folder.glob("*.trace"))
    got = ingest_into(tmp_path, "philly-derived", traces)
    assert got.summary.rows_kept == 15264 and len(traces) == 15
    first = got.job("0e4a51:1")
    assert (first["team"], first["job_name"], first["batch_size"]) == ("0e4a51", "Transformer (batch size 128)", 128)
    assert first["num_gpus"] == 1 and first["total_steps"] == 95121 and first["submit_ts"] == TRACE_EPOCH_TS
    assert (got.jobs["state"] == "PENDING").all() and got.jobs["censored"].all()  # submissions, no outcomes
    assert got.jobs["duration_s"].isna().all()
    assert set(got.jobs["num_gpus"]) <= {1, 2, 4, 7, 8, 12, 16, 20, 24, 32, 64}


def test_chronus_soft_deadline_list_uses_the_first(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,expect_time_list,"
                    "expect_value_list,best_effort,job_type\n"
                    "7,vc_abc,2,100,10,bert,50,5,300-330-360,100-80-50,0,soft\n"
                    "8,vc_abc,x,100,10,bert,50,5,300,100,0,strict\n")
    got = ingest_into(tmp_path, "philly-derived", [path])
    assert got.job("7")["deadline_ts"] == TRACE_EPOCH_TS + 100 + 300
    assert got.reason("8") == "unparseable num_gpu"
