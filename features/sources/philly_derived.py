"""Scheduling traces derived from Microsoft Philly (semi-synthetic): the Chronus artifact's
``trace_job_Philly_*.csv`` and the Gavel artifact's per-VC ``*.trace`` files.

Chronus CSV (``job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,
expect_time_list,expect_value_list,best_effort,job_type``): ``user`` holds the Philly VC
(``vc_6214e9``), so it becomes team, with the ``vc_`` prefix dropped to match the VC ids of the
Philly trace and of the Gavel files; user stays null. ``num_gpu`` -> num_gpus; ``model_name`` ->
job_name; ``duration`` -> duration_s of a COMPLETED job (the traces are inputs to a simulator, so no
start/end is recorded); ``best_effort`` 1 -> tier ``best_effort``, else ``sla``, with deadline_ts =
submit + the first ``expect_time_list`` value (the Chronus scheduler adds it to the submit time);
``iterations`` kept as an extra. Times are taken as seconds (the artifact does not state the unit).

Gavel ``.trace`` (tab-separated, no header: job type, command, steps argument, needs-data-dir flag,
total steps, arrival time, scale factor): the file name is the VC -> team; job_id =
``<vc>:<n>`` for the n-th job of the file; job type (``ResNet-50 (batch size 128)``) -> job_name and batch_size; scale factor
-> num_gpus; arrival -> submit_ts; ``total_steps`` and ``command`` kept as extras. A Gavel trace
lists submissions only, with no outcome: every row is PENDING (censored, no duration).

Relative seconds are placed at :data:`features.sources._base.TRACE_EPOCH_TS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    TRACE_EPOCH_TS,
    Reader,
    first_reason,
    malformed_reason,
    read_head,
    rechunk,
    reject_rows,
    require_columns,
    to_float,
)

CHRONUS_REQUIRED = ("job_id", "user", "num_gpu", "submit_time", "model_name", "duration", "expect_time_list",
                    "best_effort")
CHRONUS_OPTIONAL = ("iterations",)
GAVEL_COLUMNS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
                 "scale_factor")


class PhillyDerivedReader(Reader):
    """Chronus CSV and Gavel ``.trace`` files derived from Philly."""

    name = "philly-derived"
    summary = "Philly-derived scheduling traces: Chronus trace_job_*.csv and Gavel *.trace"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        first = head.split(b"\n", 1)[0]
        return (b"expect_time_list" in first and b"best_effort" in first) or (
            path.suffix == ".trace" and first.count(b"\t") == len(GAVEL_COLUMNS) - 1)

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        for path in paths:
            first = read_head(path, 1 << 14).split(b"\n", 1)[0].decode("utf-8", "replace")
            if "\t" in first:
                yield from self._gavel(path, chunk_rows)
            else:
                require_columns(path, self.name, [c.strip() for c in first.split(",")], CHRONUS_REQUIRED)
                yield from self._chronus(path, chunk_rows)

    def _batches(self, path: Path, read_opts: pacsv.ReadOptions, parse_opts: dict, columns: Sequence[str],
                 chunk_rows: int, bad: list[pd.DataFrame]) -> Iterator[pa.Table]:
        def on_invalid(row: pacsv.InvalidRow) -> str:
            bad.append(reject_rows([malformed_reason("trace", row)], self.name, raw=[row.text], source_file=[str(path)]))
            return "skip"

        with self.tracker.open_binary(path) as stream:
            csv = pacsv.open_csv(stream, read_options=read_opts,
                                 parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid, **parse_opts),
                                 convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(columns, pa.string()),
                                                                      strings_can_be_null=False))
            yield from rechunk(csv, chunk_rows)

    def _chronus(self, path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
        bad: list[pd.DataFrame] = []
        columns = CHRONUS_REQUIRED + CHRONUS_OPTIONAL
        for t in self._batches(path, pacsv.ReadOptions(block_size=4 << 20), {}, columns, chunk_rows, bad):
            checks, num = [], {}
            for col in ("num_gpu", "submit_time", "duration", "best_effort"):
                num[col], unparseable = to_float(t[col])
                checks.append((unparseable, f"unparseable {col}"))
            first_deadline = pc.replace_substring_regex(t["expect_time_list"], pattern=r"-.*$", replacement="")
            deadline, unparseable = to_float(first_deadline)
            checks.append((unparseable, "unparseable expect_time_list"))
            best_effort = num["best_effort"] == 1
            submit = TRACE_EPOCH_TS + num["submit_time"]
            team = pc.replace_substring_regex(pc.utf8_trim_whitespace(t["user"]), pattern=r"^vc_", replacement="")
            frame = pd.DataFrame({
                "job_id": t["job_id"].to_pandas(),
                "team": team.to_pandas(),
                "num_gpus": num["num_gpu"],
                "job_name": t["model_name"].to_pandas(),
                "submit_ts": submit,
                "duration_s": num["duration"],
                "state": "COMPLETED",
                "tier": np.where(best_effort, "best_effort", "sla"),
                "deadline_ts": np.where(best_effort, np.nan, submit + deadline),
                "source": self.name,
            })
            if "iterations" in t.column_names:
                frame["iterations"], _ = to_float(t["iterations"])
            frame[READER_REJECT] = first_reason(len(frame), checks)
            yield frame
        if bad:
            yield pd.concat(bad, ignore_index=True)

    def _gavel(self, path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
        bad: list[pd.DataFrame] = []
        vc = path.name.removesuffix(".gz").removesuffix(".trace")
        read_opts = pacsv.ReadOptions(block_size=4 << 20, column_names=list(GAVEL_COLUMNS))
        parse_opts = {"delimiter": "\t", "quote_char": False}
        line = 0
        for t in self._batches(path, read_opts, parse_opts, GAVEL_COLUMNS, chunk_rows, bad):
            checks, num = [], {}
            for col in ("total_steps", "arrival_time", "scale_factor"):
                num[col], unparseable = to_float(t[col])
                checks.append((unparseable, f"unparseable {col}"))
            job_type = pc.utf8_trim_whitespace(t["job_type"])
            batch = pc.struct_field(pc.extract_regex(job_type, pattern=r"\(batch size (?P<b>\d+)\)"), "b")
            numbers = np.arange(line + 1, line + t.num_rows + 1)
            line += t.num_rows
            frame = pd.DataFrame({
                "job_id": [f"{vc}:{n}" for n in numbers],
                "team": vc,
                "job_name": job_type.to_pandas(),
                "batch_size": pc.cast(batch, pa.float64()).to_numpy(zero_copy_only=False),
                "num_gpus": num["scale_factor"],
                "submit_ts": TRACE_EPOCH_TS + num["arrival_time"],
                "state": "PENDING",
                "total_steps": num["total_steps"],
                "command": t["command"].to_pandas(),
                "source": self.name,
            })
            frame[READER_REJECT] = first_reason(len(frame), checks)
            yield frame
        if bad:
            yield pd.concat(bad, ignore_index=True)
