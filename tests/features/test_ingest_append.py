"""Incremental append (features.ingest_append): one row per job id, its latest attempt and newest
observation; unfinished jobs wait; the watermark; one source per table; one run at a time."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pandas as pd
import pytest

from features.errors import InputError
from features.ingest_append import append_ingest, table_watermark

HEADER = "JobID|JobName|User|Account|Partition|QOS|Submit|Start|End|Elapsed|Timelimit|State|ReqTRES|AllocTRES|NNodes"


def _line(job: str, submit: str, start: str, end: str, state: str, account: str = "nlp") -> str:
    return (f"{job}|train|ana|{account}|gpu|normal|{submit}|{start}|{end}|00:10:00|01:00:00|{state}|"
            "billing=8,cpu=8,gres/gpu=2,mem=64G,node=1||1")


def _exporter(lines: list[str], until: float, seen: list):
    def export(folder: Path, since_ts: float | None) -> tuple[list[Path], float]:
        seen.append(since_ts)
        path = folder / "sacct.txt"
        path.write_text("\n".join([HEADER, *lines]) + "\n")
        return [path], until

    return export


def test_append_keeps_the_latest_attempt_and_skips_unfinished(tmp_path: Path) -> None:
    out = tmp_path / "history.parquet"
    seen: list = []
    first = [_line("1", "2024-05-01T10:00:00", "2024-05-01T10:01:00", "2024-05-01T10:11:00", "COMPLETED"),
             _line("2", "2024-05-01T10:00:00", "2024-05-01T10:02:00", "Unknown", "RUNNING"),
             _line("3", "2024-05-01T10:00:00", "2024-05-01T10:03:00", "2024-05-01T10:05:00", "PREEMPTED")]
    s1 = append_ingest("sacct", _exporter(first, 1_714_560_000.0, seen), out, source="slurm")
    assert (s1.rows_added, s1.rows_after, s1.unfinished_skipped) == (2, 2, 1)
    assert table_watermark(out, "slurm") == 1_714_560_000.0 and seen == [None]
    # next run: job 2 ended, job 3 was requeued (new submit) and ended, job 1 seen again unchanged
    second = [first[0],
              _line("2", "2024-05-01T10:00:00", "2024-05-01T10:02:00", "2024-05-01T11:00:00", "COMPLETED"),
              _line("3", "2024-05-01T10:06:00", "2024-05-01T10:07:00", "2024-05-01T10:40:00", "COMPLETED")]
    s2 = append_ingest("sacct", _exporter(second, 1_714_570_000.0, seen), out, source="slurm")
    assert seen[-1] == 1_714_560_000.0  # continued from the watermark
    assert (s2.rows_added, s2.rows_updated, s2.rows_after) == (1, 2, 3)
    table = pd.read_parquet(out).set_index("job_id")
    assert table.loc["3", "state"] == "COMPLETED" and table.loc["3", "duration_s"] == 33 * 60
    assert table.loc["2", "duration_s"] == 58 * 60 and table.index.is_unique
    # an older observation of an earlier attempt never replaces the latest one
    append_ingest("sacct", _exporter([first[2]], 1_714_580_000.0, seen), out, source="slurm", since_ts=0.0)
    assert pd.read_parquet(out).set_index("job_id").loc["3", "state"] == "COMPLETED"


def test_rejects_are_merged_once(tmp_path: Path) -> None:
    out = tmp_path / "history.parquet"
    bad = [_line("9", "not-a-time", "", "", "COMPLETED")]
    for _ in range(2):
        append_ingest("sacct", _exporter(bad, 1.0e9, []), out, source="slurm")
    rejects = pd.read_parquet(tmp_path / "history.rejects.parquet")
    assert len(rejects) == 1 and "Submit" in rejects["reject_reason"].iloc[0]


def test_a_table_of_another_source_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "history.parquet"
    line = [_line("1", "2024-05-01T10:00:00", "2024-05-01T10:01:00", "2024-05-01T10:11:00", "COMPLETED")]
    append_ingest("sacct", _exporter(line, 1.0e9, []), out, source="slurm")
    before = out.read_bytes()
    with pytest.raises(InputError, match="last appended from 'slurm'"):
        append_ingest("sacct", _exporter(line, 2.0e9, []), out, source="kubernetes")
    assert out.read_bytes() == before


def test_a_failing_export_leaves_the_table(tmp_path: Path) -> None:
    out = tmp_path / "history.parquet"
    line = [_line("1", "2024-05-01T10:00:00", "2024-05-01T10:01:00", "2024-05-01T10:11:00", "COMPLETED")]
    append_ingest("sacct", _exporter(line, 1.0e9, []), out, source="slurm")
    before = out.read_bytes()

    def broken(folder: Path, since_ts: float | None):
        (folder / "sacct.txt").write_text(HEADER + "\n" + line[0][:20])  # half an export, then the failure
        raise InputError("sacct died")

    with pytest.raises(InputError, match="sacct died"):
        append_ingest("sacct", broken, out, source="slurm")
    assert out.read_bytes() == before and not list(tmp_path.glob(".history.parquet.*.tmp"))


def test_one_run_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "history.parquet"
    with open(tmp_path / ".history.parquet.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(InputError, match="another ingest is appending"):
            append_ingest("sacct", _exporter([], 1.0e9, []), out, source="slurm")
