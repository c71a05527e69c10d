"""One reader per job-log format; each yields canonical-named chunks for features.schema.validate.

Use :func:`read_chunks` (or :func:`get_reader` for the reader object, e.g. to ask when the log
ends). Rows a reader could not parse carry a reason in the :data:`READER_REJECT` column; the ingest
pipeline (:mod:`features.ingest`) sends them to the rejects file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

from features.errors import InputError
from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    TRACE_EPOCH_TS,
    InputTracker,
    Reader,
    read_head,
)
from features.sources.canonical_csv import CanonicalCsvReader
from features.sources.helios import HeliosReader
from features.sources.kueue import KueueReader
from features.sources.openb import OpenbReader
from features.sources.pai import PaiReader
from features.sources.philly import PhillyReader
from features.sources.philly_derived import PhillyDerivedReader
from features.sources.sacct import SacctReader
from features.sources.swf import SwfReader

__all__ = [
    "FORMATS",
    "READERS",
    "READER_REJECT",
    "DEFAULT_CHUNK_ROWS",
    "TRACE_EPOCH_TS",
    "InputTracker",
    "Reader",
    "get_reader",
    "read_chunks",
    "sniff_format",
]

#: format name -> reader class, in the order ``--help`` lists them.
READERS: dict[str, type[Reader]] = {
    cls.name: cls
    for cls in (SacctReader, SwfReader, OpenbReader, PaiReader, KueueReader, PhillyReader, HeliosReader,
                PhillyDerivedReader, CanonicalCsvReader)
}
#: Names accepted by ``predictor ingest --format``.
FORMATS: tuple[str, ...] = tuple(READERS)


def get_reader(format: str, *, timezone: str | None = None, tracker: InputTracker | None = None) -> Reader:
    """The reader for ``format``.

    Raises
    ------
    InputError
        For an unknown format; the message lists the known ones.
    """
    try:
        cls = READERS[format]
    except KeyError:
        raise InputError(f"unknown format {format!r}; known formats: {', '.join(FORMATS)}") from None
    return cls(timezone=timezone, tracker=tracker)


def read_chunks(
    format: str, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS, *, timezone: str | None = None
) -> Iterator[pd.DataFrame]:
    """Read job logs of one format as canonical-named, not yet validated DataFrame chunks.

    Parameters
    ----------
    format : str
        One of :data:`FORMATS`.
    paths : list of Path
        Input files (gzip is detected from the content).
    chunk_rows : int
        Rows per chunk, approximately; bounds memory on huge inputs.
    timezone : str, optional
        IANA zone for timestamps written without an offset; the format's default when omitted.

    Yields
    ------
    DataFrame
        Canonical column names (a subset), extra columns, and :data:`READER_REJECT`.
    """
    if chunk_rows < 1:
        raise InputError(f"chunk_rows must be positive, got {chunk_rows}")
    yield from get_reader(format, timezone=timezone).read([Path(p) for p in paths], chunk_rows)


def sniff_format(path: Path) -> str:
    """Guess the format of ``path`` from its name and first bytes (``--format auto``).

    Raises
    ------
    InputError
        When no reader recognises the file.
    """
    path = Path(path)
    head = read_head(path)
    for name, cls in READERS.items():
        if cls.sniff(path, head):
            return name
    raise InputError(f"{path}: cannot tell its format; pass --format (one of {', '.join(FORMATS)})")
