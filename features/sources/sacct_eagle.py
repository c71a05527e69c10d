"""The NREL Eagle accounting export: a CSV rendering of ``sacct`` data, read as a variant of the
``sacct`` format (``predictor ingest --format sacct sample_eagle_data.csv``).

Columns: ``job_id,user,account,partition,qos,wallclock_req,nodes_req,processors_req,gpus_req,
mem_req,submit_time,start_time,end_time,run_time,state,name,work_dir,submit_line``.

- ``wallclock_req`` and ``run_time`` are seconds; ``mem_req`` is the job's memory request in MB
  (Slurm MB = MiB), ``0`` meaning "not requested" (null); ``gpus_req`` ``0`` is a CPU job.
- Times are ``YYYY-MM-DD HH:MM:SS`` wall clock, read in the reader's timezone (UTC by default).
- The export drops the array index of array tasks: all tasks of an array share one ``job_id``
  (in the public sample, 452 rows of job 532939, all submitted in the same second). The first
  row keeps the bare id; each repeat becomes ``<id>_<n>`` (n = 1, 2, ... in file order), the form
  sacct uses for array tasks. The number is the order in the file, not Slurm's original index.
- ``work_dir`` and ``submit_line`` (anonymised tokens) are kept as extra columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from features.sources._base import (
    READER_REJECT,
    InputTracker,
    first_reason,
    malformed_reason,
    null_tokens,
    parse_timestamps,
    reject_rows,
    require_columns,
    to_float,
)
from features.sources.slurm_fields import normalise_slurm_state


class SacctReader(Protocol):
    """What this module reads of ``features.sources.sacct.SacctReader`` (which imports this module)."""

    name: str
    timezone: str
    tracker: InputTracker

REQUIRED = ("job_id", "user", "account", "partition", "qos", "wallclock_req", "nodes_req", "processors_req",
            "gpus_req", "mem_req", "submit_time", "start_time", "end_time", "state")
OPTIONAL = ("run_time", "name", "work_dir", "submit_line")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def looks_like_eagle(header_line: str) -> bool:
    """Whether a CSV header line is the Eagle export's."""
    names = {h.strip().strip('"') for h in header_line.split(",")}
    return {"job_id", "gpus_req", "wallclock_req", "submit_time"} <= names


class ArrayTaskNumbering:
    """Numbers repeated job ids across chunks and files; remembers every id seen (a Python set)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._count: dict[str, int] = {}

    def assign(self, ids: pd.Series) -> pd.Series:
        """Return ids with repeats (within this batch or of earlier ones) suffixed ``_<n>``."""
        values = ids.astype(object).to_numpy()
        out = values.copy()
        within = pd.Series(values).groupby(values, sort=False).cumcount().to_numpy()
        for i in np.flatnonzero((within > 0) | pd.Series(values).isin(self._seen).to_numpy()):
            job = values[i]
            n = self._count.get(job, 0) + 1
            self._count[job] = n
            out[i] = f"{job}_{n}"
        self._seen.update(v for v in values if v is not None)
        return pd.Series(out, dtype="string")


def read_eagle(path: Path, reader: SacctReader, chunk_rows: int, numbering: ArrayTaskNumbering) -> Iterator[pd.DataFrame]:
    """Yield canonical chunks from one Eagle CSV file."""
    bad: list[pd.DataFrame] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        bad.append(reject_rows([malformed_reason("CSV", row)], reader.name, raw=[row.text], source_file=[str(path)]))
        return "skip"

    with reader.tracker.open_binary(path) as stream:
        csv = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(block_size=8 << 20),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in REQUIRED + OPTIONAL},
                                                 strings_can_be_null=False),
        )
        require_columns(path, "sacct (Eagle CSV)", csv.schema.names, REQUIRED)
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in csv:
            pending.append(batch)
            rows += batch.num_rows
            if rows >= chunk_rows:
                yield _convert(pa.Table.from_batches(pending), reader, numbering)
                pending, rows = [], 0
            if bad:
                yield pd.concat(bad, ignore_index=True)
                bad.clear()
        if pending:
            yield _convert(pa.Table.from_batches(pending), reader, numbering)
        if bad:
            yield pd.concat(bad, ignore_index=True)


def _convert(t: pa.Table, reader: SacctReader, numbering: ArrayTaskNumbering) -> pd.DataFrame:
    n = t.num_rows
    submit, bad_submit = parse_timestamps(null_tokens(t["submit_time"], ("Unknown", "None")), TIME_FORMAT, reader.timezone)
    start, bad_start = parse_timestamps(null_tokens(t["start_time"], ("Unknown", "None")), TIME_FORMAT, reader.timezone)
    end, bad_end = parse_timestamps(null_tokens(t["end_time"], ("Unknown", "None")), TIME_FORMAT, reader.timezone)
    numbers = {}
    bad_numbers = []
    for col in ("wallclock_req", "nodes_req", "processors_req", "gpus_req", "mem_req"):
        numbers[col], unparseable = to_float(t[col])
        bad_numbers.append((unparseable, f"unparseable {col}"))
    mem = numbers["mem_req"]
    native_ids = pd.Series(t["job_id"].to_numpy(zero_copy_only=False)).str.strip()
    frame = pd.DataFrame({
        "job_id": numbering.assign(native_ids.mask(native_ids == "")),
        "user": t["user"].to_pandas(),
        "team": t["account"].to_pandas(),
        "queue": t["partition"].to_pandas(),
        "tier": t["qos"].to_pandas(),
        "num_gpus": numbers["gpus_req"],
        "num_nodes": numbers["nodes_req"],
        "cpus": numbers["processors_req"],
        "mem_mib": np.where(mem > 0, mem, np.nan),
        "time_limit_s": numbers["wallclock_req"],
        "submit_ts": submit,
        "start_ts": start,
        "end_ts": end,
        "state": normalise_slurm_state(t["state"]).to_pandas(),
        "source": reader.name,
    })
    for native, extra in (("name", "job_name"), ("work_dir", "work_dir"), ("submit_line", "submit_line")):
        if native in t.column_names:
            frame[extra] = t[native].to_pandas()
    frame[READER_REJECT] = first_reason(n, [
        (bad_submit, "unparseable submit_time"), (bad_start, "unparseable start_time"),
        (bad_end, "unparseable end_time"), *bad_numbers,
    ])
    return frame
