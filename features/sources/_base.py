"""What every reader shares: the ``Reader`` base class, opening inputs (plain or gzip) while counting
the bytes consumed for the progress bar, column checks, timestamp/number parsing and reader-level
rejects.

Reader-level rejects
--------------------
Some rows cannot even be turned into a canonical row: a line with the wrong number of fields, a
timestamp that does not parse, an SWF partial-execution record. A reader keeps such rows in its
output with a reason in the :data:`READER_REJECT` column (null for good rows). The ingest pipeline
moves them to the rejects file with that reason; every other row goes through
:func:`features.schema.validate`. Nothing is dropped silently.
"""

from __future__ import annotations

import abc
import contextlib
import gzip
import io
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from features.errors import InputError

#: Column a reader fills with a reason when it could not parse a row (null for parsed rows).
READER_REJECT = "reader_reject_reason"

#: Default chunk size (rows) for readers; memory per chunk stays in the tens of MB.
DEFAULT_CHUNK_ROWS = 200_000

#: Epoch used for traces whose times are seconds since an undisclosed start (openb, Chronus, Gavel):
#: 2020-01-01T00:00:00Z. Gaps and order are real; calendar dates are not.
TRACE_EPOCH_TS = 1_577_836_800.0


class InputTracker:
    """Counts compressed bytes consumed across the inputs a reader opens (drives the progress bar)."""

    def __init__(self) -> None:
        self._done = 0
        self._open: list[IO[bytes]] = []

    @contextlib.contextmanager
    def open_binary(self, path: Path) -> Iterator[IO[bytes]]:
        """Open ``path`` for reading bytes, transparently decompressing gzip input.

        Raises
        ------
        InputError
            When the file is missing, is a directory, or cannot be read.
        """
        raw = open_input_raw(path)
        self._open.append(raw)
        try:
            if _is_gzip(raw):
                with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                    yield gz  # type: ignore[misc]
            else:
                yield raw
        except (OSError, EOFError, zlib.error, pa.ArrowException) as exc:
            raise InputError(f"cannot read {path}: {printable_excerpt(str(exc), 200)}") from exc
        finally:
            self._open.remove(raw)
            self._done += os.fstat(raw.fileno()).st_size
            raw.close()

    @contextlib.contextmanager
    def open_text(self, path: Path) -> Iterator[IO[str]]:
        """Like :meth:`open_binary`, decoded as UTF-8 (undecodable bytes replaced, never fatal)."""
        with self.open_binary(path) as stream:
            yield io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")

    def bytes_done(self) -> int:
        """Bytes consumed so far (compressed size for gzip inputs)."""
        current = 0
        for raw in self._open:
            try:
                current += raw.tell()
            except (OSError, ValueError):
                pass
        return self._done + current


def open_input_raw(path: Path) -> IO[bytes]:
    """Open a file for binary reading or raise :class:`InputError` naming the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"input not found: {path}")
    if path.is_dir():
        raise InputError(f"input is a directory, not a file: {path}")
    try:
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _is_gzip(raw: IO[bytes]) -> bool:
    head = raw.read(2)
    raw.seek(0)
    return head == b"\x1f\x8b"


def read_head(path: Path, n: int = 65536) -> bytes:
    """First ``n`` bytes of a file (decompressed if gzip), for sniffing and header checks."""
    raw = open_input_raw(path)
    try:
        if _is_gzip(raw):
            with gzip.GzipFile(fileobj=raw) as gz:
                try:
                    return gz.read(n)
                except (OSError, EOFError, zlib.error) as exc:
                    raise InputError(f"cannot read {path}: corrupt gzip data ({exc})") from exc
        return raw.read(n)
    finally:
        raw.close()


class Reader(abc.ABC):
    """One job-log format. Subclasses set ``name``/``summary`` and implement :meth:`read`.

    Parameters
    ----------
    timezone : str, optional
        IANA zone for timestamps written without an offset (e.g. ``2023-01-05T12:34:56``).
        ``None`` uses the format's documented default (UTC unless the format says otherwise).
    tracker : InputTracker, optional
        Shared byte counter for progress reporting; a private one is made when omitted.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    default_timezone: ClassVar[str] = "UTC"

    def __init__(self, *, timezone: str | None = None, tracker: InputTracker | None = None) -> None:
        self.timezone = timezone or self.default_timezone
        self.tracker = tracker or InputTracker()

    @abc.abstractmethod
    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        """Yield canonical-named, not yet validated chunks of at most about ``chunk_rows`` rows."""

    def log_end_hint(self, paths: Sequence[Path]) -> float | None:
        """When the log ends (epoch s) if the format states it or a cheap pass finds it; else None.

        ``None`` means: the end of the log is the latest time seen in the ingested rows.
        """
        return None

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        """Whether ``head`` (the first bytes of ``path``) looks like this format."""
        return False


# ---------------------------------------------------------------------------------------------
# column checks and parsing helpers shared by the readers
# ---------------------------------------------------------------------------------------------


#: Every format is text (or, for ``csv``, Parquet): a NUL byte near the start means another kind of file.
_PEEK_BYTES = 64 * 1024


def refuse_binary(path: Path, format: str) -> None:
    """Raise when ``path`` (gzip-compressed or not) holds binary data: the readers would otherwise
    quote garbage back, or the CSV parser trip over undecodable bytes."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_PEEK_BYTES)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as gz:
                head = gz.read(_PEEK_BYTES)
    except (OSError, EOFError, zlib.error):
        return  # unreadable or corrupt: the reader says so in its own words
    if head.startswith(b"PAR1"):
        return  # a Parquet table (the csv reader reads those)
    nul = head.find(b"\x00")
    if nul >= 0:
        raise InputError(f"{path}: binary data (a NUL byte at offset {nul:,}), not a {format} log")


def printable_excerpt(text: str, limit: int) -> str:
    """``text`` for an error message: control and other unprintable characters escaped (``\\x00``),
    cut to about ``limit`` characters (a binary file never floods the terminal)."""
    out: list[str] = []
    size = 0
    for ch in text:
        piece = ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
        if size + len(piece) > limit:
            out.append("...")
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def require_columns(path: Path, fmt: str, found: Sequence[str], required: Sequence[str]) -> None:
    """Raise :class:`InputError` naming the missing columns when ``found`` lacks any of ``required``."""
    have = set(found)
    missing = [c for c in required if c not in have]
    if missing:
        shown = printable_excerpt(", ".join(list(found)[:12]) + (", ..." if len(found) > 12 else ""), 100)
        raise InputError(
            f"{path}: not in {fmt!r} format: missing column(s) {', '.join(missing)} "
            f"(found: {shown or 'nothing'})"
        )


def null_tokens(arr: pa.Array, tokens: Sequence[str]) -> pa.Array:
    """``arr`` (strings) with blanks and the given placeholder tokens (e.g. ``Unknown``) as null."""
    stripped = pc.utf8_trim_whitespace(arr)
    bad = pc.or_(pc.equal(stripped, ""), pc.is_in(stripped, value_set=pa.array(list(tokens), pa.string())))
    return pc.if_else(bad, pa.scalar(None, pa.string()), stripped)


def parse_timestamps(arr: pa.Array, fmt: str, timezone: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse naive timestamp strings in ``timezone`` to epoch seconds (UTC).

    Nulls stay NaN. Returns ``(seconds, unparseable)`` where ``unparseable`` marks non-null strings
    that did not match ``fmt`` (the caller rejects those rows naming the column).
    """
    arr = pa.array(arr, pa.string()) if not isinstance(arr, pa.Array | pa.ChunkedArray) else arr
    ts = pc.strptime(arr, format=fmt, unit="s", error_is_null=True)
    if timezone.upper() != "UTC":
        try:
            ts = pc.assume_timezone(ts, timezone=timezone, ambiguous="earliest", nonexistent="latest")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(f"unknown or unusable timezone {timezone!r}: {exc}") from exc
    values = pc.cast(ts, pa.int64()).to_numpy(zero_copy_only=False).astype("float64")
    unparseable = (pc.is_valid(arr).to_numpy(zero_copy_only=False) & np.isnan(values))
    return values, unparseable


def to_float(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Strings to float64 (null -> NaN). Returns ``(values, unparseable)`` like :func:`parse_timestamps`."""
    text = pc.utf8_trim_whitespace(arr)
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    ok = pc.match_substring_regex(text, r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
    clean = pc.if_else(ok, text, pa.scalar(None, pa.string()))
    values = pc.cast(clean, pa.float64()).to_numpy(zero_copy_only=False).astype("float64")
    unparseable = pc.fill_null(pc.and_(pc.is_valid(text), pc.invert(ok)), False).to_numpy(zero_copy_only=False)
    return values, unparseable


def first_reason(n: int, checks: Sequence[tuple[np.ndarray, str]]) -> pd.Series:
    """Combine ``(mask, reason)`` checks into one reason per row (first failing check wins)."""
    reason = np.full(n, None, dtype=object)
    for mask, text in checks:
        mask = np.asarray(mask, dtype=bool) & (reason == None)  # noqa: E711 (elementwise)
        if mask.any():
            reason[mask] = text
    return pd.Series(reason, dtype="string")


def reject_rows(reasons: Sequence[str], source: str, **columns: Sequence[object]) -> pd.DataFrame:
    """A frame of reader-level rejects: one row per reason, plus any identifying columns given."""
    frame = pd.DataFrame({k: list(v) for k, v in columns.items()}) if columns else pd.DataFrame(index=range(len(reasons)))
    frame[READER_REJECT] = pd.Series(list(reasons), dtype="string")
    frame["source"] = source
    return frame


def malformed_reason(what: str, row: object) -> str:
    """Reject reason for a line a CSV parser could not split into the expected number of fields."""
    number = getattr(row, "number", None)
    where = f" {number}" if isinstance(number, int) and number >= 0 else ""
    return (f"malformed {what} line{where}: expected {getattr(row, 'expected_columns', '?')} fields, "
            f"found {getattr(row, 'actual_columns', '?')}")


def batched(items: Iterator[dict], size: int) -> Iterator[list[dict]]:
    """Group an iterator of records into lists of at most ``size``."""
    batch: list[dict] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def rechunk(batches: Iterator[pa.RecordBatch], chunk_rows: int) -> Iterator[pa.Table]:
    """Group Arrow record batches into tables of at least ``chunk_rows`` rows (the last one smaller)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows >= chunk_rows:
            yield pa.Table.from_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending)

