"""A table that already uses the canonical column names (``features.schema.COLUMNS``), as CSV
(plain or gzipped) or Parquet (recognised by its magic bytes). Format name: ``csv``.

Required columns: ``job_id``, ``submit_ts``, ``state``; every other canonical column is optional
(null when absent). Columns with other names are kept as extra columns: from Parquet with their
types, from CSV as text (a CSV has no types, and guessing per chunk would give one column
different types in different chunks).

Memory descriptors (``precision``, ``precision_mode``, ``quantization``, ``parallel_strategy``, the
parallel sizes, ``grad_checkpointing``, ``loss_implementation``, ``lora_rank``, ...) accept every
spelling ``features.memory_descriptors`` knows: Lightning's ``bf16-mixed`` / ``16-mixed`` /
``32-true``, Hugging Face's ``bf16=True`` / ``torch_dtype=bfloat16``, DeepSpeed's ``stage3``, FSDP's
``FULL_SHARD``, ``r=16``; a precision column holding a mode (``bf16-mixed``) also fills
``precision_mode``. A spelling it does not know rejects the row naming the column.

CSV specifics: only an empty field is null (``NA`` or ``null`` are kept as text); numbers are
parsed exactly (shortest round-trip form, as pandas and Python write them); ``*_ts`` columns also
accept ISO 8601 dates (``2024-05-01T10:00:00Z``; no offset means UTC); ``censored`` accepts
true/false/1/0. A value that does not parse rejects its row naming the column, instead of
silently becoming null.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from features.errors import InputError
from features.memory_descriptors import DESCRIPTOR_COLUMNS, normalise_descriptors
from features.schema import BOOL_COLUMNS, COLUMNS, FLOAT_COLUMNS
from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    Reader,
    first_reason,
    open_input_raw,
    read_head,
    require_columns,
    to_float,
)

REQUIRED = ("job_id", "submit_ts", "state")
_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n", ""}


class CanonicalCsvReader(Reader):
    """CSV or Parquet with canonical column names."""

    name = "csv"
    summary = "CSV or Parquet already in canonical column names (extra columns kept)"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        if head.startswith(b"PAR1"):
            return True
        first = {c.strip().strip('"') for c in head.split(b"\n", 1)[0].decode("utf-8", "replace").split(",")}
        return set(REQUIRED) <= first

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        for path in paths:
            if read_head(path, 4) == b"PAR1":
                yield from self._parquet(path, chunk_rows)
            else:
                yield from self._csv(path, chunk_rows)

    def _parquet(self, path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
        raw = open_input_raw(path)
        try:
            try:
                parquet = pq.ParquetFile(raw)
            except (pa.ArrowInvalid, OSError) as exc:
                raise InputError(f"cannot read {path}: not a valid Parquet file ({exc})") from exc
            require_columns(path, self.name, parquet.schema_arrow.names, REQUIRED)
            for batch in parquet.iter_batches(batch_size=chunk_rows):
                frame, checks = normalise_descriptors(batch.to_pandas())
                frame[READER_REJECT] = first_reason(len(frame), checks)
                frame["source"] = frame["source"].fillna(self.name) if "source" in frame else self.name
                yield frame
        finally:
            raw.close()

    def _csv(self, path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
        with self.tracker.open_binary(path) as stream:
            try:
                chunks = pd.read_csv(stream, dtype=str, keep_default_na=False, na_values=[""], chunksize=chunk_rows,
                                     encoding="utf-8", encoding_errors="replace")
                header_checked = False
                for chunk in chunks:
                    if not header_checked:
                        require_columns(path, self.name, list(chunk.columns), REQUIRED)
                        header_checked = True
                    yield self._typed(chunk)
            except pd.errors.EmptyDataError:
                raise InputError(f"{path}: empty file (no header line)") from None
            except pd.errors.ParserError as exc:
                raise InputError(f"{path}: malformed CSV: {exc}") from exc

    def _typed(self, chunk: pd.DataFrame) -> pd.DataFrame:
        chunk = chunk.reset_index(drop=True)
        chunk, checks = normalise_descriptors(chunk)  # their own spellings, numbers included
        for col in FLOAT_COLUMNS:
            if col not in chunk or col in DESCRIPTOR_COLUMNS:
                continue
            text = pa.array(chunk[col], type=pa.string(), from_pandas=True)
            values, bad = to_float(text)
            if col.endswith("_ts") and bad.any():
                iso = pd.to_datetime(chunk.loc[bad, col], utc=True, format="ISO8601", errors="coerce")
                parsed = iso.notna().to_numpy()
                idx = np.flatnonzero(bad)[parsed]
                epoch = pd.Timestamp(0, tz="UTC")
                values[idx] = (iso[parsed] - epoch).dt.total_seconds().to_numpy()
                bad[idx] = False
            chunk[col] = values
            checks.append((bad, f"unparseable {col}"))
        for col in BOOL_COLUMNS:
            if col not in chunk:
                continue
            text = chunk[col].fillna("").str.strip().str.lower()
            bad = ~text.isin(_TRUE | _FALSE)
            chunk[col] = text.isin(_TRUE)
            checks.append((bad.to_numpy(), f"unparseable {col}"))
        chunk[READER_REJECT] = first_reason(len(chunk), checks)
        chunk["source"] = chunk["source"].fillna(self.name) if "source" in chunk else self.name
        extras = [c for c in chunk.columns if c not in COLUMNS and c != READER_REJECT]
        for col in extras:
            chunk[col] = chunk[col].astype("string")
        return chunk
