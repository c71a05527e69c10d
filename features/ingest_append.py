"""Append a fresh export of ended jobs to a canonical table kept between runs, without losing or
doubling a row when a run is repeated, overlaps the last one, or is killed.

Each run ingests the export through the ordinary pipeline (:func:`features.ingest.ingest`: the
format's reader, validation, rejects), keeps the jobs that have ended, and merges them into the
table:

* a job is identified by its id and its attempt, the attempt being its submit time (Slurm gives a
  requeued job a new submit time and keeps its id; a re-created Kubernetes Workload gets a new
  creation time). For one job id the latest attempt is kept (what ``sacct`` itself reports), and
  for one attempt the newest observation, so a job seen by two overlapping runs is kept once;
* a job still pending or running is left out: the run after it ends picks it up;
* the new table is written to a temporary file beside it and renamed over it, so a run that fails
  or is killed leaves the previous table as it was; the rejects file beside it is merged the same
  way (identical reject rows kept once). One run at a time: a lock file beside the table.

The table records in its Parquet metadata up to when the cluster was read (``until_ts``, with the
source's name), so the next run continues from there.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from features.errors import InputError
from features.ingest import IngestSummary, ingest, rejects_path
from features.parquet_sink import COMPRESSION, arrow_table
from features.schema import TERMINAL_STATES, conform

__all__ = ["AppendSummary", "append_ingest", "table_watermark", "WATERMARK_KEY"]

#: Parquet metadata key holding ``{"source": ..., "until_ts": ...}`` of the last run.
WATERMARK_KEY = b"predictor.ingest.watermark"


@dataclass
class AppendSummary:
    """What one incremental run added (``to_dict()`` for JSON)."""

    output: str
    source: str
    since_ts: float | None
    until_ts: float
    rows_before: int
    rows_added: int
    rows_updated: int
    rows_after: int
    unfinished_skipped: int
    ingest: IngestSummary

    def to_dict(self) -> dict:
        """A JSON-serialisable dict of every field."""
        return asdict(self)


def table_watermark(out: Path, source: str) -> float | None:
    """Up to when (epoch s) the last run that wrote ``out`` read ``source``; None without one."""
    out = Path(out)
    if not out.is_file():
        return None
    try:
        meta = pq.read_schema(out).metadata or {}
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{out}: not a Parquet table ({exc})") from None
    if WATERMARK_KEY not in meta:
        return None
    mark = json.loads(meta[WATERMARK_KEY])
    if mark.get("source") != source:
        raise InputError(f"{out} was last appended from {mark.get('source')!r}, not {source!r}; "
                         "give each source its own table")
    return float(mark["until_ts"])


#: ``export(folder, since_ts) -> (files, until_ts)``: write the source's export into ``folder``.
Exporter = Callable[[Path, float | None], tuple[list[Path], float]]


def append_ingest(format: str, export: Exporter, out: Path, *, source: str, since_ts: float | None = None,
                  timezone: str | None = None, chunk_rows: int = 200_000) -> AppendSummary:
    """Export ``source`` since the last run, ingest it and merge its ended jobs into ``out``.

    Parameters
    ----------
    format : str
        The export's format (a name in :data:`features.sources.FORMATS`).
    export : callable (folder, since_ts) -> (list of Path, until_ts)
        Writes the export into ``folder`` (a temporary folder beside ``out``) from ``since_ts`` (None:
        everything) and says up to when it reaches (epoch seconds; the log end of its rows too).
    out : Path
        The table kept between runs (created by the first run).
    source : str
        What is read (``slurm``, ``kubernetes``): recorded with ``until_ts`` as the table's watermark.
    since_ts : float, optional
        Start of the export; default: where the last run stopped (its watermark), else everything.

    Raises
    ------
    InputError
        The export cannot be read, or ``out`` is not a table of this source.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out):
        mark = table_watermark(out, source)  # refuses a table of another source before any work
        since_ts = mark if since_ts is None else since_ts
        tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.append.tmp"
        tmp.mkdir()
        try:
            (tmp / "export").mkdir()
            paths, until_ts = export(tmp / "export", since_ts)
            fresh = tmp / "fresh.parquet"
            summary = ingest(format, paths, fresh, timezone=timezone, log_end_ts=until_ts, chunk_rows=chunk_rows,
                             require_parsed_rows=False)  # our own export: a lone bad record is a reject
            new = conform(pd.read_parquet(fresh))
            ended = new["state"].isin(list(TERMINAL_STATES)).to_numpy()
            old = conform(pd.read_parquet(out)) if out.is_file() else conform(pd.DataFrame())
            merged, added, updated = _merge(old, new.loc[ended])
            rejects = _merged_rejects(rejects_path(out), rejects_path(fresh))
            watermark = json.dumps({"source": source, "until_ts": until_ts}).encode()
            _write(merged, tmp / "table.parquet", {WATERMARK_KEY: watermark})
            _write(rejects, tmp / "rejects.parquet", {})
            (tmp / "rejects.parquet").replace(rejects_path(out))
            (tmp / "table.parquet").replace(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return AppendSummary(output=str(out), source=source, since_ts=since_ts, until_ts=until_ts,
                         rows_before=len(old), rows_added=added, rows_updated=updated, rows_after=len(merged),
                         unfinished_skipped=int((~ended).sum()), ingest=summary)


def _merge(old: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.DataFrame, int, int]:
    """Old and new rows, one per job id: its latest attempt, newest observation first; sorted."""
    old_ids = set(old["job_id"].dropna())
    added = int((~new["job_id"].isin(old_ids)).sum())
    both = pd.concat([old.assign(_run=0), new.assign(_run=1)], ignore_index=True)
    both = both.sort_values(["job_id", "submit_ts", "_run"], kind="stable", na_position="first")
    kept = both.drop_duplicates("job_id", keep="last")
    updated = int((kept["_run"] == 1).sum()) - added
    kept = kept.drop(columns="_run").sort_values(["submit_ts", "job_id"], kind="stable").reset_index(drop=True)
    return conform(kept), added, updated


def _merged_rejects(previous: Path, fresh: Path) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in (previous, fresh) if p.is_file()]
    if not frames:
        return pd.DataFrame()
    both = pd.concat(frames, ignore_index=True)
    key = both.astype("string").fillna("\x00").agg("\x1f".join, axis=1)
    return both.loc[~key.duplicated()].reset_index(drop=True)


def _write(frame: pd.DataFrame, path: Path, metadata: dict[bytes, bytes]) -> None:
    table = arrow_table(frame)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    pq.write_table(table, path, compression=COMPRESSION)
    with open(path, "rb") as fh:  # on disk before the rename makes it the table
        os.fsync(fh.fileno())


@contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Hold ``.<name>.lock`` beside ``out``; leftovers of a killed run are removed under it."""
    lock = out.parent / f".{out.name}.lock"
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"another ingest is appending to {out} (lock {lock})") from None
        for stale in out.parent.glob(f".{out.name}.*.append.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
