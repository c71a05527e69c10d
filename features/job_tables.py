"""Reading a job table a user names on the command line (Parquet or CSV), with one error wording."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from features.errors import InputError

__all__ = ["read_job_table"]


def read_job_table(path: Path, what: str) -> pd.DataFrame:
    """The table at ``path`` (``.parquet``, or ``.csv``/``.txt``); ``what`` names the option in errors
    (``--jobs: jobs.xlsx: expected a .parquet or .csv job table``)."""
    if not path.is_file():
        raise InputError(f"{what}: {path} does not exist")
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix in (".csv", ".txt"):
        return pd.read_csv(path)
    raise InputError(f"{what}: {path}: expected a .parquet or .csv job table")
