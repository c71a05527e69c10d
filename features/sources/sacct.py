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
- Memory descriptors: ``key=value`` pairs in ``Comment`` (``sbatch --comment "precision=bf16-true
  quant=nf4 strategy=zero3 ckpt=full lora_r=16"``), then ``JobName`` tokens
  (``llama3-8b-qlora-r16-z3``), as ``features.memory_conventions`` reads them.
- Residency and checkpoints (docs/residency.md): ``Constraints`` (``sbatch --constraint``, a
  feature expression) -> ``constraints`` as ``label=`` terms (an expression that does not parse
  rejects the row); ``Comment`` pairs ``checkpoint-kind=``, ``checkpoint-interval=``,
  ``checkpoint-size-gb=``, ``data-class=``, ``constraints="..."`` (``features.job_conventions``).
  The partition stays the queue (``residency.queue_is_partition`` makes it a constraint).
- Steps must follow their job line, as sacct prints them; a step group whose job line is not
  among the rows next to it is rejected with a reason rather than guessed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from features.memory_conventions import descriptors_from_slurm
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
    parse_tres,
    slurm_job_fields,
)

FIELDS = (
    "JobID", "JobName", "User", "Account", "Partition", "QOS", "Submit", "Start", "End", "Elapsed",
    "Timelimit", "State", "ReqTRES", "AllocTRES", "NNodes", "NTasks", "ReqCPUS", "TRESUsageInMax", "Comment",
    "Constraints",
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
        """Fold steps and het components into jobs; hold back the last job when more rows follow.

        Steps belong to the nearest job line above them (sacct's order); a step whose job key
        differs from that line's is an orphan and is rejected.
        """
        jid = pc.utf8_trim_whitespace(table["JobID"]).combine_chunks()
        base = pc.list_element(pc.split_pattern(jid, pattern=".", max_splits=1), 0)
        has_plus = pc.fill_null(pc.match_substring(base, "+"), False)
        key = pc.replace_substring_regex(base, pattern=r"\+\d+$", replacement="") if pc.any(has_plus).as_py() else base
        carry = None
        if not final:
            differs = np.flatnonzero(pc.fill_null(pc.not_equal(key, key[-1]), True).to_numpy(zero_copy_only=False))
            cut = int(differs[-1]) + 1 if differs.size else 0
            if cut == 0:  # one job spans the whole chunk: keep reading
                return pd.DataFrame(), table
            carry, table = table.slice(cut), table.slice(0, cut)
            jid, base, key = jid.slice(0, cut), base.slice(0, cut), key.slice(0, cut)
        step = pc.fill_null(pc.match_substring(jid, "."), False).to_numpy(zero_copy_only=False)
        is_job = ~step
        job_keys = key.filter(is_job)
        jobs = self._job_rows(table.filter(is_job), job_keys)
        frames = [jobs]
        if step.any():
            owner = np.cumsum(is_job)[step] - 1  # index of the job line each step follows
            step_keys = key.filter(step)
            owned = owner >= 0
            same = pc.equal(step_keys.filter(owned), job_keys.take(owner[owned]))
            owned[owned] = pc.fill_null(same, False).to_numpy(zero_copy_only=False)
            columns = [c for c in ("TRESUsageInMax", "AllocTRES", "NTasks", "NNodes", "State") if c in table.column_names]
            _apply_usage(jobs, table.select(columns).filter(step), owner, owned)
            if not owned.all():
                orphans = pd.unique(step_keys.filter(~owned).to_numpy(zero_copy_only=False))
                frames.append(reject_rows(
                    ["job steps without their job line just above them"]
                    * len(orphans), self.name, job_id=list(orphans)))
        het = pc.fill_null(pc.match_substring_regex(base.filter(is_job), r"\+\d+$"), False).to_numpy(zero_copy_only=False)
        if het.any():
            frames[0] = _merge_het(jobs, het)
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0], carry

    def _job_rows(self, t: pa.Table, key: pa.Array) -> pd.DataFrame:
        n = t.num_rows
        col = {c: t[c] if c in t.column_names else pa.nulls(n, _STR) for c in FIELDS}
        submit, bad_submit = parse_timestamps(null_tokens(col["Submit"], _NO_TIME), TIME_FORMAT, self.timezone)
        start, bad_start = parse_timestamps(null_tokens(col["Start"], _NO_TIME), TIME_FORMAT, self.timezone)
        end, bad_end = parse_timestamps(null_tokens(col["End"], _NO_TIME), TIME_FORMAT, self.timezone)
        limit, bad_limit = parse_slurm_duration(col["Timelimit"])
        state = normalise_slurm_state(col["State"])
        running = pc.fill_null(pc.equal(state, "RUNNING"), False).to_numpy(zero_copy_only=False)
        elapsed, bad_elapsed = np.full(n, np.nan), np.zeros(n, dtype=bool)
        if running.any():  # Elapsed only matters for jobs still running (their observed duration)
            elapsed[running], bad_elapsed[running] = parse_slurm_duration(col["Elapsed"].filter(running))
        req = parse_tres(col["ReqTRES"], bare_unit="M")
        has_tres = pc.fill_null(pc.not_equal(col["ReqTRES"], ""), False).to_numpy(zero_copy_only=False)
        gpus, gpu_type, node, cpu = req.gpus, req.gpu_type, req.node, req.cpu
        # AllocTRES fills what the request lacks: everything when ReqTRES is empty, the GPU model when
        # the request was untyped (--gres=gpu:4 is allocated as gres/gpu:a100=4)
        need = ~has_tres | ((np.nan_to_num(gpus) > 0) & pd.isna(gpu_type))
        if need.any():
            alloc = parse_tres(col["AllocTRES"].filter(need), bare_unit="M")
            gpus, node, cpu = gpus.copy(), node.copy(), cpu.copy()
            gpu_type = gpu_type.copy()
            for target, source in ((gpus, alloc.gpus), (node, alloc.node), (cpu, alloc.cpu)):
                target[need] = np.where(np.isnan(target[need]), source, target[need])
            gpu_type[need] = np.where(pd.isna(gpu_type[need]), alloc.gpu_type, gpu_type[need])
        gpus = np.where(np.isnan(gpus) & has_tres, 0.0, gpus)  # a TRES list without GPUs: CPU job
        nnodes, _ = to_float(col["NNodes"])
        req_cpus, _ = to_float(col["ReqCPUS"])
        frame = pd.DataFrame({
            "job_id": _pd_str(key),
            "job_name": _pd_str(col["JobName"]),
            "user": _pd_str(col["User"]),
            "team": _pd_str(col["Account"]),
            "queue": _pd_str(col["Partition"]),
            "tier": _pd_str(col["QOS"]),
            "num_gpus": gpus,
            "gpu_type": pd.Series(gpu_type, dtype="string"),
            "num_nodes": _first_known(node, nnodes),
            "cpus": _first_known(req.cpu, req_cpus, cpu),
            "mem_mib": req.mem_mib,
            "time_limit_s": limit,
            "submit_ts": submit,
            "start_ts": start,
            "end_ts": end,
            "state": _pd_str(state),
            "duration_s": np.where(running, elapsed, np.nan),
            "peak_vram_mib": np.nan,
            "source": self.name,
        })
        _add_descriptors(frame, col["Comment"], col["JobName"])
        job_fields, bad_constraint = slurm_job_fields(col["Constraints"].to_pylist(), col["Comment"].to_pylist())
        _add_columns(frame, job_fields)
        frame[READER_REJECT] = first_reason(n, [
            (np.array([r is not None for r in bad_constraint], dtype=bool), "unparseable Constraints"),
            (bad_submit, "unparseable Submit time"), (bad_start, "unparseable Start time"),
            (bad_end, "unparseable End time"), (bad_limit, "unparseable Timelimit"),
            (bad_elapsed, "unparseable Elapsed"), (req.bad_memory, "unparseable mem in ReqTRES"),
        ])
        return frame


def _add_descriptors(frame: pd.DataFrame, comments: pa.Array | pa.ChunkedArray,
                     names: pa.Array | pa.ChunkedArray) -> None:
    """Memory descriptors from the comment and the job name, as columns (in place; only those found)."""
    found = pd.DataFrame.from_records(descriptors_from_slurm(comments.to_pylist(), names.to_pylist()),
                                      index=frame.index)
    for column in found.columns:
        frame[column] = found[column]


def _add_columns(frame: pd.DataFrame, records: list[dict]) -> None:
    """Per-row fields as columns (in place; only those some row has)."""
    found = pd.DataFrame.from_records(records, index=frame.index)
    for column in found.columns:
        frame[column] = found[column]


def _apply_usage(jobs: pd.DataFrame, steps: pa.Table, owner: np.ndarray, owned: np.ndarray) -> None:
    """Per-GPU peak memory and OOM from the steps onto the job rows they belong to (in place)."""
    _apply_oom(jobs, steps, owner, owned)
    if "TRESUsageInMax" not in steps.column_names:
        return
    measured = pc.fill_null(pc.match_substring(steps["TRESUsageInMax"], "gres/gpumem="), False)
    measured = measured.to_numpy(zero_copy_only=False) & owned
    if not measured.any():  # only steps that report GPU memory are parsed further
        return
    steps, owner = steps.filter(measured), owner[measured]
    n = steps.num_rows
    usage = parse_tres(steps["TRESUsageInMax"], bare_unit="B").gpumem_mib
    step_gpus = parse_tres(steps["AllocTRES"], bare_unit="M").gpus if "AllocTRES" in steps.column_names \
        else np.full(n, np.nan)
    tasks = to_float(steps["NTasks"])[0] if "NTasks" in steps.column_names else np.full(n, np.nan)
    nodes = to_float(steps["NNodes"])[0] if "NNodes" in steps.column_names else np.full(n, np.nan)
    divisor = np.where(np.isnan(tasks), nodes, tasks)
    per_task = step_gpus / np.where(divisor > 0, divisor, np.nan)
    job_per_task = jobs["num_gpus"].to_numpy()[owner] / np.maximum(
        np.nan_to_num(jobs["num_nodes"].to_numpy()[owner], nan=1.0), 1.0)
    per_task = np.where(np.isnan(per_task), job_per_task, per_task)
    per_task = np.where(np.isnan(per_task) | (per_task < 1), 1.0, per_task)
    peak_per_gpu = usage / per_task
    hit = ~np.isnan(peak_per_gpu)
    if hit.any():
        peaks = jobs["peak_vram_mib"].to_numpy().copy()
        np.fmax.at(peaks, owner[hit], peak_per_gpu[hit])
        jobs["peak_vram_mib"] = peaks


def _apply_oom(jobs: pd.DataFrame, steps: pa.Table, owner: np.ndarray, owned: np.ndarray) -> None:
    """A job reported FAILED whose step ran out of memory is OUT_OF_MEMORY (older Slurm)."""
    if "State" in steps.column_names:
        oom_step = pc.fill_null(pc.match_substring_regex(steps["State"], r"^\s*(OUT_OF_MEMORY|OOM)\b"), False)
        oom_step = oom_step.to_numpy(zero_copy_only=False) & owned
        if oom_step.any():
            oom = np.zeros(len(jobs), dtype=bool)
            oom[owner[oom_step]] = True
            jobs.loc[oom & (jobs["state"] == "FAILED").to_numpy(), "state"] = "OUT_OF_MEMORY"


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
    merged["peak_vram_mib"] = grouped["peak_vram_mib"].max()
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


def read_sacct_text(text: str, *, timezone: str = "UTC", log_end_ts: float | None = None) -> pd.DataFrame:
    """The valid canonical jobs of ``sacct -P`` output (read and validated exactly as ``predictor
    ingest --format sacct`` reads a file), for callers that run sacct themselves."""
    from features.schema import validate

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sacct.txt"
        path.write_text(text)
        frames = [f for f in SacctReader(timezone=timezone).read([path]) if len(f)]
    if not frames:
        return validate(pd.DataFrame({"job_id": pd.Series([], dtype=object)})).jobs
    frame = pd.concat(frames, ignore_index=True)
    frame = frame.loc[frame[READER_REJECT].isna()] if READER_REJECT in frame.columns else frame
    return validate(frame.drop(columns=[READER_REJECT], errors="ignore"), log_end_ts=log_end_ts).jobs
