"""Standard Workload Format (Parallel Workloads Archive), plain or gzipped.

Eighteen whitespace-separated numeric fields per job; ``;`` lines are header comments
(``UnixStartTime``, ``MaxProcs``, ``TimeZoneString``, ...); ``-1`` means unknown and becomes null.

Mapping: 1 job number -> job_id; 2 submit (s after ``UnixStartTime``) -> submit_ts; 3 wait ->
start_ts = submit + wait; 4 run time -> end_ts = start + run and duration_s; 8 requested processors
(else 5, allocated) -> cpus; 9 requested time -> time_limit_s; 10 requested memory (KB per
processor) x processors -> mem_mib; 11 status -> state (1 COMPLETED, 0 FAILED, 5 CANCELLED, -1
unknown: null, so the row is rejected as ``missing state``); 12 user -> user; 13 group -> team;
14 executable (application) number -> job_name, the identity of recurring jobs; 15 queue -> queue;
16 partition -> extra column ``partition``. SWF records no GPUs: num_gpus stays null.

Partial executions (status 2, 3, 4: pieces of a checkpointed or swapped job that follow the job's
summary line with the same number) are rejected with a reason: the summary line already holds the
job's request, total run time and outcome, and keeping both would count the job twice.

End of log: SWF has no "still running" status, so no row is censored; the pipeline takes the log
end as the latest time seen. When the header lacks ``UnixStartTime`` the relative times are placed
at :data:`features.sources._base.TRACE_EPOCH_TS`.

Parsing: blocks of whole lines go through pandas' C whitespace parser; a block with a malformed
line (wrong field count, non-numeric text) is re-read line by line so the bad line alone is
rejected, naming its line number.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from features.sources._base import DEFAULT_CHUNK_ROWS, READER_REJECT, TRACE_EPOCH_TS, Reader, reject_rows

N_FIELDS = 18
_STATUS = {1.0: "COMPLETED", 0.0: "FAILED", 5.0: "CANCELLED"}
_PARTIAL = (2.0, 3.0, 4.0)
_BYTES_PER_LINE = 96  # typical SWF line length, sizes the blocks read


class SwfReader(Reader):
    """Standard Workload Format logs."""

    name = "swf"
    summary = "Standard Workload Format (Parallel Workloads Archive), plain or .gz"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        #: Header fields of the last file read (``UnixStartTime``, ``MaxProcs``, ...), as strings.
        self.header: dict[str, str] = {}

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        name = path.name.lower()
        return name.endswith((".swf", ".swf.gz")) or head.lstrip().startswith(b"; Version") or b"; UnixStartTime" in head

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        for path in paths:
            yield from self._read_file(path, chunk_rows)

    def _read_file(self, path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
        with self.tracker.open_binary(path) as stream:
            header: dict[str, str] = {}
            line_no = 0
            first: list[bytes] = []
            for line in stream:
                line_no += 1
                text = line.strip()
                if text.startswith(b";"):
                    key, sep, value = text[1:].decode("utf-8", "replace").partition(":")
                    if sep and key.strip() and key.strip() not in header:
                        header[key.strip()] = value.strip()
                    continue
                first.append(line)
                break
            self.header = header
            origin = _origin(header)
            block_start = line_no
            lines = first + stream.readlines(max(chunk_rows, 1) * _BYTES_PER_LINE)
            while lines:
                yield self._convert_block(lines, block_start, origin, path)
                block_start += len(lines)
                lines = stream.readlines(max(chunk_rows, 1) * _BYTES_PER_LINE)

    def _convert_block(self, lines: list[bytes], first_line: int, origin: float, path: Path) -> pd.DataFrame:
        values, rejects = _parse_block(lines, first_line, path)
        frame = self._to_canonical(values, origin)
        if rejects is not None:
            frame = pd.concat([frame, rejects], ignore_index=True)
        return frame

    def _to_canonical(self, v: np.ndarray, origin: float) -> pd.DataFrame:
        v = np.where(v == -1.0, np.nan, v)
        submit = origin + v[:, 1]
        start = submit + v[:, 2]
        end = start + v[:, 3]
        procs = np.where(np.isnan(v[:, 7]), v[:, 4], v[:, 7])
        status = v[:, 10]
        state = pd.Series(np.select([status == k for k in _STATUS], list(_STATUS.values()), None), dtype="string")
        partial = np.isin(status, _PARTIAL)
        frame = pd.DataFrame({
            "job_id": _ints_to_str(v[:, 0]),
            "job_name": _ints_to_str(v[:, 13]),
            "user": _ints_to_str(v[:, 11]),
            "team": _ints_to_str(v[:, 12]),
            "queue": _ints_to_str(v[:, 14]),
            "cpus": procs,
            "mem_mib": v[:, 9] * procs / 1024.0,
            "time_limit_s": v[:, 8],
            "submit_ts": submit,
            "start_ts": start,
            "end_ts": end,
            "duration_s": v[:, 3],
            "state": state,
            "partition": _ints_to_str(v[:, 15]),
            "source": self.name,
        })
        reason = pd.Series(pd.NA, index=frame.index, dtype="string")
        if partial.any():
            reason[partial] = [
                f"SWF partial-execution record (status {int(s)}) of job {j}: the job is kept from its summary line"
                for s, j in zip(status[partial], frame.loc[partial, "job_id"], strict=True)
            ]
        frame[READER_REJECT] = reason
        return frame


def _origin(header: dict[str, str]) -> float:
    try:
        return float(header["UnixStartTime"])
    except (KeyError, ValueError):
        return TRACE_EPOCH_TS


def _parse_block(lines: list[bytes], first_line: int, path: Path) -> tuple[np.ndarray, pd.DataFrame | None]:
    """Fast path through pandas; on any malformed line, fall back to per-line parsing."""
    try:
        frame = pd.read_csv(io.BytesIO(b"".join(lines)), sep=r"\s+", comment=";", header=None,
                            names=range(N_FIELDS), dtype="float64", engine="c")
        values = frame.to_numpy()
        if not np.isnan(values).any():
            return values, None
    except (ValueError, pd.errors.ParserError):
        pass
    good: list[list[float]] = []
    reasons, raws, numbers = [], [], []
    for offset, line in enumerate(lines):
        text = line.split(b";", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        problem = None
        if len(fields) != N_FIELDS:
            problem = f"expected {N_FIELDS} fields, found {len(fields)}"
        else:
            try:
                row = [float(f) for f in fields]
                if any(np.isnan(row)):
                    problem = "NaN in a numeric field"
            except ValueError:
                bad = next(f for f in fields if not _is_number(f))
                problem = f"non-numeric field {bad.decode('utf-8', 'replace')!r}"
        if problem is None:
            good.append(row)
        else:
            reasons.append(f"malformed SWF line {first_line + offset}: {problem}")
            raws.append(line.decode("utf-8", "replace").rstrip("\r\n"))
            numbers.append(first_line + offset)
    values = np.array(good, dtype="float64").reshape(-1, N_FIELDS)
    rejects = reject_rows(reasons, SwfReader.name, job_id=[r.split()[0] if r.split() else None for r in raws],
                          raw=raws, source_file=[str(path)] * len(raws), source_line=numbers)
    return values, rejects


def _is_number(token: bytes) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _ints_to_str(values: np.ndarray) -> pd.Series:
    """Integer-valued floats to strings (``12.0`` -> ``"12"``), NaN to null (vectorised in Arrow)."""
    known = ~np.isnan(values)
    integral = known & (values == np.floor(np.where(known, values, 0.0)))
    text = pa.array(np.where(integral, values, 0).astype("int64"), mask=~integral).cast(pa.string())
    if (known & ~integral).any():  # fractional ids are not expected in SWF; keep them readable
        floats = pa.array(values, mask=~(known & ~integral)).cast(pa.string())
        text = pc.coalesce(text, floats)
    return pd.Series(pd.arrays.ArrowStringArray(text))
