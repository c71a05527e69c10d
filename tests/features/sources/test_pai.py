"""PAI reader. No public sample of the PAI 2020 tables is in shared data: ``tests/fixtures/pai``
was written by hand from the schema in the alibaba/clusterdata cluster-trace-gpu-v2020 README
(header-less CSVs as published; the group tag table carries a header to test both)."""

from __future__ import annotations

import pandas as pd
import pytest

from features.errors import InputError
from features.sources import read_chunks
from features.sources.pai import PAI_EPOCH_OFFSET_S, identify_table

from .conftest import FIXTURES, ingest_into

TABLES = sorted((FIXTURES / "pai").glob("*.csv"))


@pytest.fixture(scope="module")
def pai(tmp_path_factory):
    return ingest_into(tmp_path_factory.mktemp("pai"), "pai", TABLES)


@pytest.mark.parametrize(
    "job_id, state, num_gpus, gpu_milli, gpu_type, cpus, mem_mib, nodes, peak",
    [
        # ps (6 CPUs, 29.296875 GiB) + 2 workers at 50% of a T4 each
        ("i1", "COMPLETED", 2, 500, "T4", 6 + 2 * 4, (29.296875 + 2 * 10) * 1024, 2, 3.0 * 1024),
        # one instance with 8 V100s; its 64 GiB sensor peak is spread over 8 GPUs
        ("i2", "FAILED", 8, 1000, "V100", 8, 20 * 1024, 1, 64 * 1024 / 8),
        ("i3", "RUNNING", 4, 1000, "P100", 8, 20 * 1024, 2, None),
        ("i4", "PENDING", 1, 250, None, 1, 2 * 1024, None, None),
    ],
)
def test_joined_jobs(pai, job_id, state, num_gpus, gpu_milli, gpu_type, cpus, mem_mib, nodes, peak):
    row = pai.job(job_id)
    assert (row["state"], row["num_gpus"], row["gpu_milli"], row["cpus"]) == (state, num_gpus, gpu_milli, cpus)
    assert row["mem_mib"] == pytest.approx(mem_mib)
    for col, want in (("gpu_type", gpu_type), ("num_nodes", nodes), ("peak_vram_mib", peak)):
        assert (want is None and pd.isna(row[col])) or row[col] == want, col


def test_times_and_group_tag(pai):
    row = pai.job("i1")
    assert row["submit_ts"] == PAI_EPOCH_OFFSET_S + 1000
    assert row["start_ts"] == PAI_EPOCH_OFFSET_S + 1100  # earliest task/instance launch
    assert row["end_ts"] == PAI_EPOCH_OFFSET_S + 5000 and row["duration_s"] == 3900
    assert (row["job_name"], row["workload"], row["pai_job_name"], row["user"]) == ("g-recurring", "bert", "j1", "u1")
    running = pai.job("i3")
    assert running["censored"] and pd.isna(running["end_ts"]) and running["duration_s"] == 5000 - 3100


def test_epoch_offset_keeps_weekday_and_time_of_day():
    assert PAI_EPOCH_OFFSET_S % (7 * 86400) == 0
    assert pd.Timestamp(PAI_EPOCH_OFFSET_S, unit="s").strftime("%Y-%m-%d %A") == "2020-07-02 Thursday"


def test_zero_submit_time_is_unknown(pai):
    assert pai.reason("i5") == "missing or unparseable submit time"


def test_job_table_alone_is_enough(tmp_path):
    got = ingest_into(tmp_path, "pai", [FIXTURES / "pai/pai_job_table.csv"])
    assert got.jobs["num_gpus"].isna().all()  # requests live in the task table
    # without task/instance launch times a finished job has no start: rejected, not guessed
    assert got.reason("i1") == "completed without a start time"
    assert got.job("i2")["state"] == "FAILED"


def test_job_table_is_required():
    with pytest.raises(InputError, match="no pai_job_table"):
        list(read_chunks("pai", [FIXTURES / "pai/pai_task_table.csv"]))


@pytest.mark.parametrize("name, table", [("pai_job_table.csv", "job"), ("pai_task_table.csv", "task"),
                                         ("pai_instance_table.csv", "instance"), ("pai_sensor_table.csv", "sensor"),
                                         ("pai_group_tag_table.csv", "group_tag")])
def test_tables_are_recognised_by_content(tmp_path, name, table):
    renamed = tmp_path / "whatever.csv"
    renamed.write_bytes((FIXTURES / "pai" / name).read_bytes())
    assert identify_table(renamed) == table


def test_unknown_table_shape(tmp_path):
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b,c\n")
    with pytest.raises(InputError, match="not a PAI table: 3 columns"):
        identify_table(odd)


def test_bad_side_table_row_is_rejected_not_fatal(tmp_path):
    task = tmp_path / "pai_task_table.csv"
    task.write_text((FIXTURES / "pai/pai_task_table.csv").read_text() + "j2,extra,1,Failed,x,2600,100,1,0,\n")
    got = ingest_into(tmp_path, "pai", [FIXTURES / "pai/pai_job_table.csv", task])
    assert got.summary.rejected_by_reason["unparseable start_time in pai_task_table"] == 1
    assert got.job("i2")["num_gpus"] == 8  # the good rows of that job still count
