"""Microsoft Philly ``cluster_job_log`` (msr-fiddle/philly-traces, ATC'19): a JSON array of jobs.

Each job: ``jobid``, ``user``, ``vc``, ``submitted_time``, ``status`` (Pass / Killed / Failed) and
``attempts[]`` with ``start_time``, ``end_time`` and ``detail[]`` (``ip``, ``gpus[]``). JSON Lines
is accepted too.

Mapping (one row per job): job_id = jobid, user = user, team = vc; state Pass -> COMPLETED,
Killed -> CANCELLED, Failed -> FAILED; submit = submitted_time; start = the first attempt's start,
end = the last attempt's end (the trace README's and ATC'19's run time: first start to last end);
num_gpus / num_nodes = GPUs / servers of the last attempt; extra ``attempts`` = number of attempts.
A job whose last attempt has no end was running when the snapshot was taken: RUNNING, censored.
A job with no attempts never ran (no start, no end).

Times are wall-clock strings of the Philly cluster, read as ``America/Los_Angeles`` (the trace's
utilisation logs are stamped PDT/PST) unless ``--timezone`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    Reader,
    batched,
    first_reason,
    parse_timestamps,
)
from features.sources.jsonstream import iter_records

_STATUS = {"Pass": "COMPLETED", "Killed": "CANCELLED", "Failed": "FAILED"}
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class PhillyReader(Reader):
    """Philly ``cluster_job_log`` JSON."""

    name = "philly"
    summary = "Microsoft Philly cluster_job_log JSON (attempts folded into one row per job)"
    default_timezone = "America/Los_Angeles"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        return b'"attempts"' in head and b'"submitted_time"' in head

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        for path in paths:
            with self.tracker.open_text(path) as stream:
                for batch in batched(iter_records(stream, path), chunk_rows):
                    yield self._frame([job_record(item) for item in batch])

    def _frame(self, records: list[dict[str, Any]]) -> pd.DataFrame:
        frame = pd.DataFrame.from_records(records)
        checks = []
        for col in ("submit_ts", "start_ts", "end_ts"):
            raw = pa.array([v if isinstance(v, str) and v.strip() not in ("", "None") else None for v in frame.pop(col)],
                           pa.string())
            frame[col], bad = parse_timestamps(raw, TIME_FORMAT, self.timezone)
            checks.append((bad, f"unparseable {col.removesuffix('_ts')} time"))
        structural = frame.pop(READER_REJECT).astype("string")
        frame[READER_REJECT] = structural.fillna(first_reason(len(frame), checks))
        frame["source"] = self.name
        return frame


def job_record(item: Any) -> dict[str, Any]:
    """One Philly job object -> canonical fields (times still as strings)."""
    if not isinstance(item, dict):
        return {"job_id": None, READER_REJECT: f"not a job object ({type(item).__name__})"}
    attempts = item.get("attempts") or []
    record: dict[str, Any] = {
        "job_id": item.get("jobid"),
        "user": item.get("user"),
        "team": item.get("vc"),
        "state": _STATUS.get(item.get("status"), item.get("status")),
        "submit_ts": item.get("submitted_time"),
        "start_ts": None,
        "end_ts": None,
        "attempts": len(attempts),
        READER_REJECT: None,
    }
    if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
        record[READER_REJECT] = "attempts is not a list of objects"
        return record
    if attempts:
        first, last = attempts[0], attempts[-1]
        record["start_ts"] = first.get("start_time")
        record["end_ts"] = last.get("end_time")
        detail = [d for d in last.get("detail") or [] if isinstance(d, dict)]
        record["num_gpus"] = float(sum(len(d.get("gpus") or []) for d in detail)) if detail else np.nan
        record["num_nodes"] = float(len({d.get("ip") for d in detail})) if detail else np.nan
        if record["end_ts"] in (None, "None"):
            record["state"] = "RUNNING"  # README: a None end on the last attempt = still running
    return record
