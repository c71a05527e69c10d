"""SenseTime Helios ``cluster_log.csv`` (S-Lab-System-Group/HeliosData, SC'21).

Columns: ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,
queue`` (``vc`` optional). Dates are ``YYYY-MM-DD HH:MM:SS`` wall clock, read in the reader's
timezone (UTC by default; the trace does not state its zone). ``duration`` (end - start) and
``queue`` (queue *time*, start - submit, not a queue name) are derived columns: the canonical
duration is recomputed from start/end and the queue time is not kept.

Mapping: job_id, user; vc -> team; gpu_num -> num_gpus; cpu_num -> cpus; node_num -> num_nodes;
state is Slurm's (COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    Reader,
    first_reason,
    malformed_reason,
    null_tokens,
    parse_timestamps,
    rechunk,
    reject_rows,
    require_columns,
    to_float,
)
from features.sources.slurm_fields import normalise_slurm_state

REQUIRED = ("job_id", "user", "gpu_num", "cpu_num", "node_num", "state", "submit_time", "start_time", "end_time")
OPTIONAL = ("vc",)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class HeliosReader(Reader):
    """Helios ``cluster_log.csv``."""

    name = "helios"
    summary = "SenseTime Helios cluster_log.csv"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        first = {c.strip() for c in head.split(b"\n", 1)[0].decode("utf-8", "replace").split(",")}
        return {"gpu_num", "cpu_num", "node_num", "submit_time"} <= first

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        for path in paths:
            bad: list[pd.DataFrame] = []

            def on_invalid(row: pacsv.InvalidRow, path: Path = path, bad: list = bad) -> str:
                bad.append(reject_rows([malformed_reason("CSV", row)], self.name, raw=[row.text],
                                       source_file=[str(path)]))
                return "skip"

            with self.tracker.open_binary(path) as stream:
                csv = pacsv.open_csv(
                    stream, read_options=pacsv.ReadOptions(block_size=8 << 20),
                    parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
                    convert_options=pacsv.ConvertOptions(
                        column_types={c: pa.string() for c in REQUIRED + OPTIONAL}, strings_can_be_null=False,
                        include_columns=[c for c in REQUIRED + OPTIONAL], include_missing_columns=True))
                require_columns(path, self.name, _header(path), REQUIRED)
                for table in rechunk(csv, chunk_rows):
                    yield self._convert(table)
            if bad:
                yield pd.concat(bad, ignore_index=True)

    def _convert(self, t: pa.Table) -> pd.DataFrame:
        checks = []
        times = {}
        for col in ("submit_time", "start_time", "end_time"):
            times[col], bad = parse_timestamps(null_tokens(t[col], ("None", "Unknown", "NaN", "nan")), TIME_FORMAT,
                                               self.timezone)
            checks.append((bad, f"unparseable {col}"))
        nums = {}
        for col in ("gpu_num", "cpu_num", "node_num"):
            nums[col], bad = to_float(t[col])
            checks.append((bad, f"unparseable {col}"))
        frame = pd.DataFrame({
            "job_id": t["job_id"].to_pandas(),
            "user": t["user"].to_pandas(),
            "team": t["vc"].to_pandas(),
            "num_gpus": nums["gpu_num"],
            "cpus": nums["cpu_num"],
            "num_nodes": nums["node_num"],
            "state": normalise_slurm_state(t["state"]).to_pandas(),
            "submit_ts": times["submit_time"],
            "start_ts": times["start_time"],
            "end_ts": times["end_time"],
            "source": self.name,
        })
        frame[READER_REJECT] = first_reason(len(frame), checks)
        return frame


def _header(path: Path) -> list[str]:
    from features.sources._base import read_head

    return [c.strip() for c in read_head(path, 1 << 14).split(b"\n", 1)[0].decode("utf-8", "replace").split(",")]
