"""The ingest pipeline: read a job log in chunks, validate each chunk, write the canonical table and
the rejects beside it, and summarise.

Memory stays bounded by the chunk size plus three things that grow with the log, each small:
the set of job ids seen (64-bit hashes, 8 bytes per job, to catch duplicates across chunks; two
different ids collide with probability about n^2 / 2^65, i.e. 3e-8 for a million jobs, and a
collision would reject a row as a duplicate, visibly, never drop it), the sets
of distinct users and teams, and the rows still running when the log ends (bounded by the
cluster's concurrency, not the log's length; see below).

End of log (for censored rows): taken from ``log_end_ts`` when given; else from the reader when
its format states it or a cheap first pass finds it (openb: the largest of its three time
columns); else it is the latest time seen in the kept rows. In that last case the end is only
known once everything has been read, so rows still running at the end (censored, with a start
and no observed duration) are held back and written last with ``duration_s = log_end - start``.

Outputs are written to a temporary folder beside ``out`` and moved into place only when the
whole run succeeded: a failed run leaves nothing half-written (an older ``out`` stays as it was).
"""

from __future__ import annotations

import functools
import math
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

from features.errors import InputError
from features.outputs import check_output_file, output_errors
from features.parquet_sink import ParquetSink
from features.schema import COLUMNS, conform, empty_jobs, validate
from features.sources import READER_REJECT, InputTracker, get_reader, sniff_format
from features.sources._base import printable_excerpt, refuse_binary
from features.sources.canonical_csv import CanonicalCsvReader

__all__ = ["IngestSummary", "ingest", "load_jobs", "rejects_path"]

#: Show a progress bar only for inputs at least this large (bytes).
PROGRESS_MIN_BYTES = 8 << 20


@dataclass
class IngestSummary:
    """What one ingest run read, kept and rejected (``to_dict()`` for JSON)."""

    format: str
    inputs: list[str]
    output: str
    rejects_output: str
    rows_read: int = 0
    rows_kept: int = 0
    rows_rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    censored: int = 0
    first_submit: str | None = None
    last_time: str | None = None
    log_end: str | None = None
    span_days: float | None = None
    users: int = 0
    teams: int = 0
    gpu_jobs: int = 0
    gpu_types: dict[str, int] = field(default_factory=dict)
    input_bytes: int = 0
    seconds: float = 0.0
    rows_per_second: float = 0.0

    def to_dict(self) -> dict:
        """A JSON-serialisable dict of every field."""
        return asdict(self)


def rejects_path(out: Path) -> Path:
    """Where the rejects of an ingest writing ``out`` go: ``<stem>.rejects.parquet`` beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}.rejects.parquet")


def ingest(
    format: str,
    paths: Sequence[Path],
    out: Path,
    *,
    progress: bool = False,
    chunk_rows: int = 200_000,
    timezone: str | None = None,
    log_end_ts: float | None = None,
    require_parsed_rows: bool = True,
) -> IngestSummary:
    """Read job logs, validate them, write the canonical table and its rejects.

    Parameters
    ----------
    format : str
        A name in :data:`features.sources.FORMATS`, or ``"auto"`` to guess from the first input.
    paths : list of Path
        Input files of that format.
    out : Path
        The canonical table (Parquet); rejects go to :func:`rejects_path` ``(out)``.
    progress : bool
        Show a progress bar (by bytes read) on stderr for inputs over 8 MB.
    chunk_rows : int
        Rows per chunk; bounds memory.
    timezone : str, optional
        IANA zone for timestamps written without an offset (format default when omitted).
    log_end_ts : float, optional
        When the log ends, epoch seconds; overrides what the reader or the data say.
    require_parsed_rows : bool, default True
        A file in which not one row parses is an error (it is of another kind). False for exports
        this project ran itself (``predictor ingest --from-slurm``), whose rejects are kept.

    Returns
    -------
    IngestSummary

    Raises
    ------
    InputError
        Missing or unreadable input, unknown format, or a file whose columns do not match.
    """
    started = time.perf_counter()
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError("no input files given")
    for path in paths:
        if not path.exists():
            raise InputError(f"input not found: {path}")
        if not path.is_file():
            raise InputError(f"input is not a file: {path}")
    if timezone is not None:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InputError(f"unknown timezone {timezone!r} (use an IANA name such as UTC or Europe/Berlin)") from None
    out = check_output_file(Path(out))  # before any reading: a bad destination fails at once
    if format == "auto":
        format = sniff_format(paths[0])
    for path in paths:
        refuse_binary(path, format)
    tracker = InputTracker()
    reader = get_reader(format, timezone=timezone, tracker=tracker)
    log_end = log_end_ts if log_end_ts is not None else reader.log_end_hint(paths)
    total_bytes = sum(p.stat().st_size for p in paths)
    summary = IngestSummary(format=format, inputs=[str(p) for p in paths], output=str(out),
                            rejects_output=str(rejects_path(out)), input_bytes=total_bytes)
    tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.tmp"
    with output_errors(out):
        tmp.mkdir()
    try:
        state = _RunState(log_end)
        with output_errors(out):
            jobs_sink = ParquetSink(tmp / "jobs", _empty_template(False).copy())
            rejects_sink = ParquetSink(tmp / "rejects", _empty_rejects())
        with _progress_bar(progress and total_bytes >= PROGRESS_MIN_BYTES, total_bytes, format) as advance:
            for chunk in reader.read(paths, chunk_rows):
                if len(chunk):
                    kept, rejected = state.process(chunk)
                    with output_errors(out):
                        jobs_sink.write(kept)
                        rejects_sink.write(rejected)
                advance(tracker.bytes_done())
        if require_parsed_rows:
            _no_row_parsed(state, format, paths)
        with output_errors(out):
            jobs_sink.write(state.finish())
            rejects_sink.finish(tmp / "rejects.parquet")
            jobs_sink.finish(tmp / "jobs.parquet")
            (tmp / "rejects.parquet").replace(rejects_path(out))
            (tmp / "jobs.parquet").replace(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    state.fill(summary)
    summary.seconds = round(time.perf_counter() - started, 3)
    summary.rows_per_second = round(summary.rows_read / summary.seconds, 1) if summary.seconds > 0 else 0.0
    return summary


def load_jobs(path: Path) -> pd.DataFrame:
    """Read a canonical table back (Parquet or CSV), conformed to the schema's columns and types.

    Raises
    ------
    InputError
        When the file is missing, unreadable, or a CSV value does not parse.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input not found: {path}")
    reader = CanonicalCsvReader()
    frames = list(reader.read([path]))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    if READER_REJECT in frame:
        bad = frame[READER_REJECT].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{path}: row {row + 1}: {frame.loc[row, READER_REJECT]}")
        frame = frame.drop(columns=READER_REJECT)
    return conform(frame)


def _no_row_parsed(state: _RunState, format: str, paths: Sequence[Path]) -> None:
    """Raise when not one row of the input parsed in ``format`` (a file of another kind: binary, or
    another format): an empty table would be written and reported as a success otherwise."""
    if state.read == 0 or state.unparsed < state.read:
        return
    names = ", ".join(str(p) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
    first = printable_excerpt(state.first_unparsed or "", 120)
    raise InputError(f"{names}: no row parses as {format} ({state.read:,} rejected; the first: {first}); "
                     f"is it a {format} file?")


class _RunState:
    """Everything that spans chunks: seen ids, held-back censored rows, summary counters."""

    def __init__(self, log_end: float | None) -> None:
        self.log_end = log_end
        self.seen = _SeenIds()
        self.held: list[pd.DataFrame] = []
        self.read = self.kept = self.censored = self.gpu_jobs = self.unparsed = 0
        self.first_unparsed: str | None = None
        self.reasons: Counter[str] = Counter()
        self.gpu_types: Counter[str] = Counter()
        self.users: set[str] = set()
        self.teams: set[str] = set()
        self.first_submit = math.inf
        self.last_time = -math.inf

    def process(self, chunk: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Validate one reader chunk; return (rows to write now, rejects)."""
        chunk = chunk.reset_index(drop=True)
        self.read += len(chunk)
        pre = chunk.pop(READER_REJECT).astype("string") if READER_REJECT in chunk else None
        rejects = []
        if pre is not None and pre.notna().any():
            bad = pre.notna().to_numpy()
            self.unparsed += int(bad.sum())
            self.first_unparsed = self.first_unparsed or str(pre[bad].iloc[0])
            early = conform(chunk.loc[bad])
            early["reject_reason"] = pre[bad].to_numpy()
            rejects.append(early)
            chunk = chunk.loc[~bad]
        result = validate(chunk, log_end_ts=self.log_end if self.log_end is not None else np.nan)
        jobs = result.jobs
        rejects.append(result.rejects)
        hashes = _id_hashes(jobs["job_id"])
        dup = self.seen.contains(hashes)
        if dup.any():
            again = jobs.loc[dup].copy()
            again["reject_reason"] = "duplicate job_id"
            rejects.append(again)
            jobs, hashes = jobs.loc[~dup].reset_index(drop=True), hashes[~dup]
        self.seen.add(hashes)
        if self.log_end is None:
            open_run = (jobs["censored"] & jobs["duration_s"].isna() & jobs["start_ts"].notna()).to_numpy()
            if open_run.any():
                self.held.append(jobs.loc[open_run])
                jobs = jobs.loc[~open_run].reset_index(drop=True)
        self._count(jobs)
        rejected = pd.concat([r for r in rejects if len(r)], ignore_index=True) if any(len(r) for r in rejects) \
            else _empty_rejects()
        self.reasons.update(rejected["reject_reason"].astype(str).tolist())
        return jobs, rejected

    def finish(self) -> pd.DataFrame:
        """The held-back running rows, with their observed durations now that the log end is known."""
        if not self.held:
            return _empty_template(False).copy()
        held = pd.concat(self.held, ignore_index=True)
        self.last_time = max(self.last_time, float(np.nanmax(held[["submit_ts", "start_ts"]].to_numpy())))
        end = self.last_time
        held["duration_s"] = np.maximum(end - held["start_ts"].to_numpy(), 0.0)
        self._count(held)
        return held

    def _count(self, jobs: pd.DataFrame) -> None:
        if not len(jobs):
            return
        self.kept += len(jobs)
        self.censored += int(jobs["censored"].sum())
        gpu = (jobs["num_gpus"] > 0) | (jobs["gpu_milli"] > 0)
        self.gpu_jobs += int(gpu.sum())
        self.gpu_types.update(jobs.loc[gpu, "gpu_type"].dropna().astype(str).tolist())
        self.users.update(jobs["user"].dropna().unique().tolist())
        self.teams.update(jobs["team"].dropna().unique().tolist())
        times = jobs[["submit_ts", "start_ts", "end_ts"]].to_numpy(dtype="float64")
        if not np.isnan(times).all():
            self.last_time = max(self.last_time, float(np.nanmax(times)))
        if jobs["submit_ts"].notna().any():
            self.first_submit = min(self.first_submit, float(jobs["submit_ts"].min()))

    def fill(self, summary: IngestSummary) -> None:
        summary.rows_read, summary.rows_kept = self.read, self.kept
        summary.rows_rejected = sum(self.reasons.values())
        summary.rejected_by_reason = dict(self.reasons.most_common())
        summary.censored, summary.gpu_jobs = self.censored, self.gpu_jobs
        summary.gpu_types = dict(self.gpu_types.most_common())
        summary.users, summary.teams = len(self.users), len(self.teams)
        end = self.log_end if self.log_end is not None else self.last_time
        if math.isfinite(self.first_submit):
            summary.first_submit = _iso(self.first_submit)
        if math.isfinite(self.last_time):
            summary.last_time = _iso(self.last_time)
        if end is not None and math.isfinite(end):
            summary.log_end = _iso(end)
            if math.isfinite(self.first_submit):
                summary.span_days = round((end - self.first_submit) / 86400.0, 3)


class _SeenIds:
    """A set of 64-bit id hashes kept as sorted runs merged like a log-structured tree (O(n log n))."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        found = np.zeros(len(hashes), dtype=bool)
        for run in self.runs:
            idx = np.searchsorted(run, hashes)
            hit = idx < len(run)
            found[hit] |= run[idx[hit]] == hashes[hit]
        return found

    def add(self, hashes: np.ndarray) -> None:
        run = _sorted_unique(hashes)
        while self.runs and len(self.runs[-1]) <= 2 * len(run):
            run = _sorted_unique(np.concatenate([self.runs.pop(), run]))
        self.runs.append(run)


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def _id_hashes(ids: pd.Series) -> np.ndarray:
    """64-bit hashes of job ids (Python's string hash: stable within one run, which is all we need)."""
    return np.fromiter(map(hash, ids.to_numpy(dtype=object)), dtype=np.int64, count=len(ids))


@functools.cache
def _empty_template(with_reason: bool) -> pd.DataFrame:
    frame = conform(empty_jobs())
    if with_reason:
        frame["reject_reason"] = pd.Series(dtype="string")
    return frame


def _empty_rejects() -> pd.DataFrame:
    return _empty_template(True).copy()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _progress_bar:  # noqa: N801 (used as a context manager, reads like a function)
    """A rich progress bar by bytes on stderr, or a no-op when disabled."""

    def __init__(self, enabled: bool, total: int, label: str) -> None:
        self.enabled, self.total, self.label = enabled, total, label
        self.progress = None

    def __enter__(self) -> Callable[[int], None]:
        if not self.enabled:
            return lambda done: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.progress = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                                 transient=True)
        self.progress.start()
        task = self.progress.add_task(f"ingest {self.label}", total=self.total)
        return lambda done: self.progress.update(task, completed=min(done, self.total))

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
