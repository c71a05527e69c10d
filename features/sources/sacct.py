"""Slurm accounting exports: ``sacct -P`` / ``--parsable2`` text (and ``-p``, with its trailing ``|``),
plus the NREL Eagle CSV export as a recognised variant (see :mod:`features.sources.sacct_eagle`).

What an admin typically runs::

    sacct -a -P -S 2024-01-01 -E now \\
      -o JobID,JobName,User,Account,Partition,QOS,Submit,Start,End,Elapsed,Timelimit,State,\\
         ReqTRES,AllocTRES,NNodes,TRESUsageInMax

Mapping (one canonical row per job; the header line names the fields, any order, extra fields ignored):

- ``JobID`` ``123`` / array task ``123_4`` is the job; its steps ``123.batch``, ``123.extern``,
  ``123.0`` (and ``123_4.batch``) are folded into it. Heterogeneous components ``123+0``,
  ``123+1`` are one job ``123``: their requests are summed, submit/start take the earliest and
  end the latest, and the state is the worst component's.
- The job line carries the request: ``ReqTRES`` (``cpu``, ``mem``, ``node``, ``gres/gpu``,
  ``gres/gpu:<type>``), falling back to ``AllocTRES`` and ``NNodes``. ``Account`` -> team,
  ``Partition`` -> queue, ``QOS`` -> tier, ``Timelimit`` -> time_limit_s.
- Steps carry usage: peak GPU memory per GPU is the largest ``gres/gpumem`` in any step's
  ``TRESUsageInMax`` divided by the GPUs one task of that step holds (Slurm sums a task's GPUs;
  the step's ``gres/gpu`` over ``NTasks`` when exported, else over the step's ``NNodes``). A step
  that ended ``OUT_OF_MEMORY`` turns a job reported ``FAILED`` into ``OUT_OF_MEMORY``.
- Times: ``Submit``/``Start``/``End`` are local wall-clock strings; they are read in the reader's
  timezone (UTC unless ``--timezone``; run ``TZ=UTC sacct ...`` to avoid guessing). ``Unknown``
  and ``None`` are null. A job still running keeps ``Elapsed`` as its observed duration.
- Steps must follow their job line, as sacct prints them; a step group whose job line is not
  among the rows next to it is rejected with a reason rather than guessed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from features.sources import sacct_eagle
from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    Reader,
    first_reason,
    malformed_reason,
    null_tokens,
    parse_timestamps,
    read_head,
    reject_rows,
    require_columns,
    to_float,
)
from features.sources.slurm_fields import (
    normalise_slurm_state,
    parse_slurm_duration,
    tres_count,
    tres_gpu_type,
    tres_memory_mib,
)

FIELDS = (
    "JobID", "JobName", "User", "Account", "Partition", "QOS", "Submit", "Start", "End", "Elapsed",
    "Timelimit", "State", "ReqTRES", "AllocTRES", "NNodes", "NTasks", "ReqCPUS", "TRESUsageInMax",
)
REQUIRED = ("JobID", "User", "Submit", "State")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
_NO_TIME = ("Unknown", "None", "N/A")
# Order in which a heterogeneous job's component states win (first present wins).
_STATE_PRIORITY = ("RUNNING", "PENDING", "NODE_FAIL", "OUT_OF_MEMORY", "FAILED", "TIMEOUT", "PREEMPTED",
                   "CANCELLED", "COMPLETED")
_STR = pa.string()


class SacctReader(Reader):
    """Slurm ``sacct -P`` text, or the NREL Eagle CSV export of the same accounting data."""

    name = "sacct"
    summary = "Slurm `sacct -P` export (job steps folded into jobs), or the NREL Eagle CSV variant"

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        eagle = sacct_eagle.ArrayTaskNumbering()
        for path in paths:
            header = _first_line(path)
            if "|" not in header and sacct_eagle.looks_like_eagle(header):
                yield from sacct_eagle.read_eagle(path, self, chunk_rows, eagle)
            else:
                yield from self._read_pipe(path, header, chunk_rows)

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        first = head.split(b"\n", 1)[0].decode("utf-8", "replace")
        return ("|" in first and "JobID" in first) or sacct_eagle.looks_like_eagle(first)

    # -- pipe-separated text ----------------------------------------------------------------------

    def _read_pipe(self, path: Path, header: str, chunk_rows: int) -> Iterator[pd.DataFrame]:
        names = [h.strip() for h in header.rstrip("\r\n").split("|")]
        require_columns(path, self.name, [n for n in names if n], REQUIRED)
        wanted = [n for n in names if n in FIELDS]
        bad_lines: list[pd.DataFrame] = []

        def on_invalid(row: pacsv.InvalidRow) -> str:
            bad_lines.append(reject_rows(
                [malformed_reason("sacct", row)],
                self.name, job_id=[row.text.split("|", 1)[0].strip() or None], raw=[row.text],
                source_file=[str(path)]))
            return "skip"

        read_opts = pacsv.ReadOptions(block_size=8 << 20, column_names=[n or f"_unnamed{i}" for i, n in enumerate(names)],
                                      skip_rows=1)
        parse_opts = pacsv.ParseOptions(delimiter="|", quote_char=False, invalid_row_handler=on_invalid)
        convert_opts = pacsv.ConvertOptions(column_types={n: _STR for n in wanted}, include_columns=wanted,
                                            strings_can_be_null=False)
        carry: pa.Table | None = None
        with self.tracker.open_binary(path) as stream:
            reader = pacsv.open_csv(stream, read_options=read_opts, parse_options=parse_opts,
                                    convert_options=convert_opts)
            pending: list[pa.RecordBatch] = []
            rows = 0
            for batch in reader:
                pending.append(batch)
                rows += batch.num_rows
                if rows >= chunk_rows:
                    table = _concat(carry, pending)
                    frame, carry = self._fold(table, final=False)
                    pending, rows = [], 0
                    yield from _with_bad_lines(frame, bad_lines)
            table = _concat(carry, pending)
            if table is not None and table.num_rows:
                frame, _ = self._fold(table, final=True)
                yield from _with_bad_lines(frame, bad_lines)
            elif bad_lines:
                yield from _with_bad_lines(None, bad_lines)

    def _fold(self, table: pa.Table, *, final: bool) -> tuple[pd.DataFrame, pa.Table | None]:
        """Fold steps and het components into jobs; hold back the last job when more rows follow."""
        jid = pc.utf8_trim_whitespace(table["JobID"])
        base = pc.replace_substring_regex(jid, pattern=r"\..*$", replacement="")
        key = pc.replace_substring_regex(base, pattern=r"\+\d+$", replacement="")
        carry = None
        if not final:
            keys = key.to_numpy(zero_copy_only=False)
            differs = np.flatnonzero(keys != keys[-1])
            cut = int(differs[-1]) + 1 if differs.size else 0
            if cut == 0:  # one job spans the whole chunk: keep reading
                return pd.DataFrame(), table
            carry, table = table.slice(cut), table.slice(0, cut)
            jid, base, key = jid.slice(0, cut), base.slice(0, cut), key.slice(0, cut)
        step = pc.fill_null(pc.match_substring(jid, "."), False).to_numpy(zero_copy_only=False)
        jobs_idx, steps_idx = np.flatnonzero(~step), np.flatnonzero(step)
        jobs = self._job_rows(table.take(jobs_idx), key.take(jobs_idx))
        job_het = pc.match_substring_regex(base.take(jobs_idx), r"\+\d+$").to_numpy(zero_copy_only=False)
        if job_het.any():
            jobs = _merge_het(jobs, job_het)
        frames = [jobs]
        if steps_idx.size:
            usage = _step_usage(table.take(steps_idx), key.take(steps_idx))
            frames.append(self._apply_usage(jobs, usage))
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else jobs, carry

    def _job_rows(self, t: pa.Table, key: pa.Array) -> pd.DataFrame:
        n = t.num_rows
        col = {c: t[c] if c in t.column_names else pa.nulls(n, _STR) for c in FIELDS}
        submit, bad_submit = parse_timestamps(null_tokens(col["Submit"], _NO_TIME), TIME_FORMAT, self.timezone)
        start, bad_start = parse_timestamps(null_tokens(col["Start"], _NO_TIME), TIME_FORMAT, self.timezone)
        end, bad_end = parse_timestamps(null_tokens(col["End"], _NO_TIME), TIME_FORMAT, self.timezone)
        limit, bad_limit = parse_slurm_duration(col["Timelimit"])
        elapsed, bad_elapsed = parse_slurm_duration(col["Elapsed"])
        req, alloc = null_tokens(col["ReqTRES"], ()), null_tokens(col["AllocTRES"], ())
        mem, bad_mem = tres_memory_mib(req, "mem", bare_unit="M")
        gpus = _first_known(tres_count(req, "gres/gpu"), tres_count(alloc, "gres/gpu"))
        has_tres = pc.fill_null(pc.is_valid(req), False).to_numpy(zero_copy_only=False)
        gpus = np.where(np.isnan(gpus) & has_tres, 0.0, gpus)  # a TRES list without GPUs: CPU job
        nnodes, _ = to_float(col["NNodes"])
        req_cpus, _ = to_float(col["ReqCPUS"])
        state = normalise_slurm_state(col["State"])
        running = pc.fill_null(pc.is_in(state, value_set=pa.array(["RUNNING"])), False).to_numpy(zero_copy_only=False)
        frame = pd.DataFrame({
            "job_id": _pd_str(key),
            "job_name": _pd_str(col["JobName"]),
            "user": _pd_str(col["User"]),
            "team": _pd_str(col["Account"]),
            "queue": _pd_str(col["Partition"]),
            "tier": _pd_str(col["QOS"]),
            "num_gpus": gpus,
            "gpu_type": _pd_str(pc.coalesce(tres_gpu_type(req), tres_gpu_type(alloc))),
            "num_nodes": _first_known(tres_count(req, "node"), tres_count(alloc, "node"), nnodes),
            "cpus": _first_known(tres_count(req, "cpu"), req_cpus, tres_count(alloc, "cpu")),
            "mem_mib": mem,
            "time_limit_s": limit,
            "submit_ts": submit,
            "start_ts": start,
            "end_ts": end,
            "state": _pd_str(state),
            "duration_s": np.where(running, elapsed, np.nan),
            "source": self.name,
        })
        frame[READER_REJECT] = first_reason(n, [
            (bad_submit, "unparseable Submit time"), (bad_start, "unparseable Start time"),
            (bad_end, "unparseable End time"), (bad_limit, "unparseable Timelimit"),
            (bad_elapsed, "unparseable Elapsed"), (bad_mem, "unparseable mem in ReqTRES"),
        ])
        return frame

    def _apply_usage(self, jobs: pd.DataFrame, usage: pd.DataFrame) -> pd.DataFrame:
        """Set peak memory / OOM on ``jobs`` from step usage; return rejects for steps without a job."""
        aligned = usage.reindex(pd.Index(jobs["job_id"].astype(object)))
        per_task = jobs["num_gpus"].to_numpy() / np.maximum(np.nan_to_num(jobs["num_nodes"].to_numpy(), nan=1.0), 1.0)
        gpus_per_task = aligned["gpus_per_task"].to_numpy()
        gpus_per_task = np.where(np.isnan(gpus_per_task), per_task, gpus_per_task)
        gpus_per_task = np.where(np.isnan(gpus_per_task) | (gpus_per_task < 1), 1.0, gpus_per_task)
        jobs["peak_vram_mib"] = aligned["gpumem_mib"].to_numpy() / gpus_per_task
        oom = aligned["oom"].fillna(False).to_numpy(dtype=bool) & (jobs["state"] == "FAILED").to_numpy()
        jobs.loc[oom, "state"] = "OUT_OF_MEMORY"
        orphans = usage.index[~usage.index.isin(jobs["job_id"].astype(object))]
        return reject_rows(
            ["job steps without their job line (sacct prints each job line right before its steps)"] * len(orphans),
            self.name, job_id=list(orphans))


def _step_usage(t: pa.Table, key: pa.Array) -> pd.DataFrame:
    """Per job key: max GPU memory of a task, GPUs per task of that step, whether a step hit OOM."""
    n = t.num_rows
    usage = t["TRESUsageInMax"] if "TRESUsageInMax" in t.column_names else pa.nulls(n, _STR)
    alloc = t["AllocTRES"] if "AllocTRES" in t.column_names else pa.nulls(n, _STR)
    gpumem, _ = tres_memory_mib(usage, "gres/gpumem", bare_unit="B")
    step_gpus = tres_count(alloc, "gres/gpu")
    tasks, _ = to_float(t["NTasks"]) if "NTasks" in t.column_names else (np.full(n, np.nan), None)
    nodes, _ = to_float(t["NNodes"]) if "NNodes" in t.column_names else (np.full(n, np.nan), None)
    divisor = np.where(np.isnan(tasks), nodes, tasks)
    state = normalise_slurm_state(t["State"]) if "State" in t.column_names else pa.nulls(n, _STR)
    frame = pd.DataFrame({
        "key": key.to_numpy(zero_copy_only=False),
        "gpumem_mib": gpumem,
        "gpus_per_task": step_gpus / np.where(divisor > 0, divisor, np.nan),
        "oom": pc.fill_null(pc.equal(state, "OUT_OF_MEMORY"), False).to_numpy(zero_copy_only=False),
    })
    # the step with the largest task peak decides the per-task divisor
    frame = frame.sort_values("gpumem_mib", ascending=False, na_position="last", kind="stable")
    return frame.groupby("key", sort=False).agg(
        gpumem_mib=("gpumem_mib", "first"), gpus_per_task=("gpus_per_task", "first"), oom=("oom", "any"))


def _merge_het(jobs: pd.DataFrame, het: np.ndarray) -> pd.DataFrame:
    """Collapse heterogeneous-job components (same job_id) into one row."""
    plain, parts = jobs.loc[~het], jobs.loc[het]
    grouped = parts.groupby("job_id", sort=False)
    merged = grouped.first()
    for col in ("num_gpus", "num_nodes", "cpus", "mem_mib"):
        merged[col] = grouped[col].sum(min_count=1)
    merged["submit_ts"] = grouped["submit_ts"].min()
    merged["start_ts"] = grouped["start_ts"].min()
    merged["end_ts"] = grouped["end_ts"].max()
    merged["time_limit_s"] = grouped["time_limit_s"].max()
    rank = {s: i for i, s in enumerate(_STATE_PRIORITY)}
    merged["state"] = grouped["state"].agg(
        lambda s: min(s.dropna(), key=lambda v: rank.get(v, -1), default=pd.NA))
    merged[READER_REJECT] = grouped[READER_REJECT].first()
    return pd.concat([plain, merged.reset_index()], ignore_index=True)


def _first_line(path: Path) -> str:
    head = read_head(path, 1 << 16)
    line = head.split(b"\n", 1)[0].decode("utf-8", "replace").lstrip("\ufeff")
    if not line.strip():
        from features.errors import InputError

        raise InputError(f"{path}: empty file or missing header line (run sacct without --noheader)")
    return line


def _concat(carry: pa.Table | None, batches: list[pa.RecordBatch]) -> pa.Table | None:
    tables = ([carry] if carry is not None and carry.num_rows else []) + (
        [pa.Table.from_batches(batches)] if batches else [])
    if not tables:
        return None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _with_bad_lines(frame: pd.DataFrame | None, bad_lines: list[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    if frame is not None and len(frame):
        yield frame
    if bad_lines:
        yield pd.concat(bad_lines, ignore_index=True)
        bad_lines.clear()


def _first_known(*arrays: np.ndarray) -> np.ndarray:
    out = np.asarray(arrays[0], dtype="float64").copy()
    for arr in arrays[1:]:
        out = np.where(np.isnan(out), arr, out)
    return out


def _pd_str(arr: pa.Array | pa.ChunkedArray) -> pd.Series:
    return pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array([arr]) if isinstance(arr, pa.Array) else arr))
